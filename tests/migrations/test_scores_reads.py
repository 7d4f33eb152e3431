"""The read side of the scores store, and how it tells a retryable PostgreSQL error.

Found by mutation testing (tools/mutation/run.py, group ``scores``): nothing asked for the
score of a job never scored, nothing checked the tie-breaks of ``scores_for``'s order, and
nothing fed ``_sqlstate`` (which decides whether a failed batch is retried) a real driver
error.
"""

from __future__ import annotations

import asyncpg.exceptions
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store.scores import (
    _RETRY_SQLSTATES,
    _sqlstate,
    record_scores,
    score_by_job,
    scores_for,
)
from tests.migrations.test_scores_idempotent import _score, _seed


async def test_a_job_never_scored_has_no_score(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0"])
    assert await score_by_job(engine, "JOB_none") is None


async def test_scores_for_orders_by_seq_in_a_round_and_by_acceptance_across(
    engine: AsyncEngine,
) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0", "RND_1"])
    # Job ids run against seq and acceptance, so an order by id alone shows; the ties are
    # written later id first, so an order without the id's tie-break shows too.
    for batch in (
        [_score("JOB_a", "PLR_a", 1, False, 300, "RND_0"), _score("JOB_b", "PLR_a", 0, False, 200)],
        [_score("JOB_d", "PLR_a", 0, False, 100, "RND_1")],
        [_score("JOB_c", "PLR_a", 1, False, 100, "RND_1")],  # accepted with JOB_d
        [_score("JOB_f", "PLR_a", 2, False, 400, "RND_0")],
        [_score("JOB_e", "PLR_a", 2, False, 400, "RND_0")],  # seq 2 again: not the game's
    ):
        await record_scores(engine, batch)
    assert [s.job_id for s in await scores_for(engine, "PLR_a", "RND_0")] == [
        "JOB_b",
        "JOB_a",
        "JOB_e",
        "JOB_f",
    ]
    assert [s.job_id for s in await scores_for(engine, "PLR_a")] == [
        "JOB_c",
        "JOB_d",
        "JOB_b",
        "JOB_a",
        "JOB_e",
        "JOB_f",
    ]


def _wrapped(orig: BaseException) -> DBAPIError:
    return DBAPIError.instance("UPDATE totals …", None, orig, DBAPIError)


def test_a_deadlock_or_serialization_failure_from_asyncpg_is_retryable() -> None:
    for error in (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError):
        code = _sqlstate(_wrapped(error("boom")))
        assert code in _RETRY_SQLSTATES and code == error.sqlstate
    assert _sqlstate(_wrapped(asyncpg.exceptions.UniqueViolationError("dup"))) == "23505"


def test_an_error_without_a_sqlstate_has_none() -> None:
    assert _sqlstate(_wrapped(ValueError("not from a database"))) is None
