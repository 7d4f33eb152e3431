"""The ScoreWorker: the handler an EchoMQ Consumer runs over the guesses queue.

It scores a claimed guess against its round's secret and writes the score and the
player's totals in one SQL transaction keyed on the JOB id, then returns the result,
with which the Consumer completes the job under its fencing token. Every step may be
repeated (a crash after the commit, a lost lease, a zombie): the SQL write is a no-op
the second time and the result is the same, so a guess is counted once.

The handlers of one worker share a :class:`~codemojex.store.GroupCommit`: the guesses
they score at the same time are written in one transaction (one fsync, a handful of
statements per batch), and each handler returns — so its job is completed — only after
the batch holding its score committed.

When the database cannot be reached (PostgreSQL down or restarting: a refused or dropped
connection, "the database system is starting up", an administrator's shutdown; SQLite
still locked past its busy timeout), the handler raises :class:`echomq.Unavailable`: the
guess goes back to its lane with no delivery spent and no failure counted, and the worker
claims nothing more until the database answers: the consumer calls :meth:`ScoreWorker.probe`
(a write that touches no row), backing off up to half a second. Any other SQL error fails
the attempt like any handler error.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import sys
import time
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine

import echomq
from codemojex import store, tracing
from codemojex.crashpoints import maybe_crash
from codemojex.guesses import player_of
from codemojex.results import ScoreResult, score_result
from codemojex.rounds import Rounds
from codemojex.rules import feedback, points_for


def _pg_down() -> tuple[type[BaseException], ...]:
    """asyncpg's errors that mean the server cannot be reached. Looked up, not imported:
    asyncpg costs ~45 ms of import in every process, and an error of it can only have been
    raised once SQLAlchemy's PostgreSQL dialect has imported it."""
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is None:
        return ()
    return (
        asyncpg.PostgresConnectionError,  # SQLSTATE class 08
        asyncpg.CannotConnectNowError,  # 57P03: starting up, shutting down
        asyncpg.AdminShutdownError,  # 57P01: pg_ctl stop -m fast
        asyncpg.CrashShutdownError,  # 57P02
        asyncpg.TooManyConnectionsError,  # 53300
        asyncpg.ConnectionDoesNotExistError,
    )


# A probe that has not answered by then counts as "still down" (asyncpg's own connect
# timeout is 60 s; the consumer waits for the probe before it tries again).
PROBE_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)

# What SQLite says when another connection holds the lock past the busy timeout, or the
# file cannot be opened (a volume not mounted yet).
_SQLITE_DOWN = ("database is locked", "database table is locked", "unable to open database")


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the database cannot be reached right now,
    rather than that this write is wrong: the guess should wait, not fail."""
    down = (OSError, TimeoutError, PoolTimeout, *_pg_down())
    todo: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, DBAPIError) and e.connection_invalidated:
            return True  # SQLAlchemy saw the connection drop
        if isinstance(e, down):
            return True  # refused, reset, unreachable, timed out, shut down
        if isinstance(e, sqlite3.OperationalError) and any(m in str(e) for m in _SQLITE_DOWN):
            return True
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]
    return False


class ScoreWorker:
    def __init__(
        self,
        engine: AsyncEngine,
        rounds: Rounds,
        worker_id: str,
        score_delay_ms: int = 0,
        *,
        group: store.GroupCommit | None = None,
    ) -> None:
        self.engine = engine
        self.group = group or store.GroupCommit(engine)
        self.rounds = rounds
        self.worker_id = worker_id
        self.score_delay_ms = score_delay_ms
        self.scored = 0  # scores this worker wrote (first writes only)
        self.current: dict[str, int] = {}  # job_id -> lease_until_ms, for the admin page

    async def handle(self, claim: echomq.Claim) -> ScoreResult:
        maybe_crash("after_claim")
        self.current[claim.job_id] = claim.lease_until_ms
        try:
            return await self._score(claim)
        except Exception as e:
            if unreachable(e):
                reason = f"the database is unreachable ({type(e).__name__}: {e})"
                raise echomq.Unavailable(reason[:300]) from e
            raise
        finally:
            self.current.pop(claim.job_id, None)

    async def _score(self, claim: echomq.Claim) -> ScoreResult:
        p = claim.payload
        player = player_of(p, claim.lane)
        if player is None:
            raise LookupError(f"job {claim.job_id} names no player")  # fails -> retried
        with tracing.span("score"):  # no-op unless tracing (codemojex.tracing)
            rnd = await self.rounds.get(p["round_id"])
            if rnd is None:
                raise LookupError(f"round {p['round_id']} is unknown")  # fails -> retried
            guess = tuple(p["guess"])
            seq = claim.seq if claim.seq is not None else int(p.get("seq", 0))
            fb = feedback(rnd.secret, guess)
            points = points_for(seq, fb.solved)
            if self.score_delay_ms:
                await asyncio.sleep(self.score_delay_ms / 1000)  # stands in for heavy scoring
        record = store.ScoreRecord(
            job_id=claim.job_id,
            round_id=rnd.round_id,
            player_id=player,
            seq=seq,
            guess=guess,
            exact=fb.exact,
            near=fb.near,
            solved=fb.solved,
            points=points,
            accepted_at_ms=claim.enqueued_at_ms,
            scored_at_ms=int(time.time() * 1000),
            attempts=claim.token,
            worker_id=self.worker_id,
        )
        # One span per guess for the time it waited for the commit of the batch that
        # carried it: a batch serves many guesses, each in its own trace.
        with tracing.span("sql.commit"):
            if await self.group.write(record):
                self.scored += 1
        maybe_crash("after_commit")  # the batch holding this score has committed
        # Everything the browser needs rides on the completion event.
        return score_result(record, self.worker_id)

    async def close(self) -> None:
        """Wait for the scores in flight to commit; no handler may run after this."""
        await self.group.close()

    async def probe(self) -> None:
        """The consumer's probe while the database is down (``Consumer(probe=)``): returns
        once a score write could go through, raises while it could not.

        Not EchoMQ's default probe job: it needs a job to probe with, and with two workers
        the one still waiting can find none for seconds at a time once PostgreSQL is back,
        the other, already scoring, claiming each guess first. An error that does not say
        the database is unreachable (a missing table, a refused permission) ends the wait
        too: the handlers then meet it and fail the attempt."""
        try:
            await asyncio.wait_for(store.check_writable(self.engine), PROBE_TIMEOUT_S)
        except Exception as e:
            if unreachable(e):
                raise
            log.warning("probe: the database answered with %s: %s", type(e).__name__, e)

    def meta(self) -> dict[str, Any]:
        """What the heartbeat tells the admin page about this worker."""
        job_id, lease = next(iter(self.current.items()), ("", 0))
        return {
            "state": "scoring" if self.current else "idle",
            "job_id": job_id,
            "lease_until_ms": lease,
            "scored": self.scored,
        }
