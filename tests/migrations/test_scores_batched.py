"""Batched score writes (``record_scores``) leave exactly the rows per-guess writes leave.

The oracle is the per-guess write as it was before group commit
(``harness/legacy_scores.py``): whatever the split into batches, the order, the
duplicates inside a batch or across batches, every table — scores, round points, totals —
must end up identical, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex import rules
from codemojex.store import (
    Round,
    ScoreRecord,
    create_player,
    hash_token,
    leaderboard,
    make_engine,
    migrate,
    record_score,
    record_scores,
    save_round,
    score_by_job,
    sqlite_url,
)
from codemojex.store.models import PlayerRow, RoundPointsRow, RoundRow, ScoreRow, TotalRow
from harness.legacy_scores import legacy_record_score
from harness.pg import PgCluster

T = TypeVar("T")
SECRET = ("🍎", "🍌", "🍇", "🍒")
MISS = ("🍑", "🍑", "🍑", "🍑")
NEAR = ("🍌", "🍎", "🍑", "🍑")


def _score(
    job_id: str,
    player_id: str,
    seq: int,
    guess: tuple[str, ...],
    accepted_at_ms: int,
    round_id: str = "RND_0",
    *,
    attempts: int = 1,
    worker_id: str = "WRK_A",
) -> ScoreRecord:
    fb = rules.feedback(SECRET, guess)
    return ScoreRecord(
        job_id=job_id,
        round_id=round_id,
        player_id=player_id,
        seq=seq,
        guess=guess,
        exact=fb.exact,
        near=fb.near,
        solved=fb.solved,
        points=rules.points_for(seq, fb.solved),
        accepted_at_ms=accepted_at_ms,
        scored_at_ms=accepted_at_ms + 5,
        attempts=attempts,
        worker_id=worker_id,
    )


def _again(score: ScoreRecord, attempts: int = 2) -> ScoreRecord:
    """The same job delivered again: a retry or a zombie, by another worker."""
    return dataclasses.replace(score, attempts=attempts, worker_id="WRK_B", scored_at_ms=9)


async def _seed(engine: AsyncEngine, players: Sequence[str], rounds: Sequence[str]) -> None:
    for i, pid in enumerate(players):
        await create_player(engine, f"p{i}", hash_token(pid), 1_000 + i, player_id=pid)
    for i, rid in enumerate(rounds):
        await save_round(
            engine, Round(rid, 4, rules.DEFAULT_PALETTE, SECRET, 10_000 * i, 10_000 * (i + 1))
        )


async def _tables(engine: AsyncEngine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the three tables scoring writes, every column, in a fixed order."""
    order = {
        ScoreRow: (ScoreRow.job_id,),
        RoundPointsRow: (RoundPointsRow.player_id, RoundPointsRow.round_id),
        TotalRow: (TotalRow.player_id,),
    }
    async with engine.connect() as conn:
        return {
            table.__tablename__: [tuple(r) for r in await conn.execute(select(table).order_by(*o))]
            for table, o in order.items()
        }


async def _wipe(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for table in (ScoreRow, RoundPointsRow, TotalRow, RoundRow, PlayerRow):
            await conn.execute(delete(table))


# --- examples -------------------------------------------------------------------------


async def test_a_batch_skips_the_jobs_already_written(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a", "PLR_b"], ["RND_0"])
    first = _score("JOB_1", "PLR_a", 0, NEAR, 100)
    solve = _score("JOB_2", "PLR_a", 1, SECRET, 200)
    assert await record_score(engine, first) is True
    assert await record_score(engine, solve) is True
    before = await _tables(engine)

    # Retries of both, as a batch: nothing moves, nothing is returned.
    assert await record_scores(engine, [_again(solve), _again(first)]) == set()
    assert await _tables(engine) == before

    # Mixed with new jobs: only the new ones are written and counted.
    other = _score("JOB_3", "PLR_b", 0, SECRET, 300)
    late = _score("JOB_4", "PLR_a", 2, SECRET, 400)
    assert await record_scores(engine, [_again(solve), other, _again(first), late]) == {
        "JOB_3",
        "JOB_4",
    }
    assert await score_by_job(engine, "JOB_2") == solve  # the first write stands
    assert await leaderboard(engine) == [
        {"player_id": "PLR_b", "name": "p1", "points": 110, "solved_rounds": 1},
        {"player_id": "PLR_a", "name": "p0", "points": 100, "solved_rounds": 1},
    ]


async def test_a_batch_with_many_guesses_of_one_round_keeps_the_best(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0", "RND_1"])
    batch = [
        _score("JOB_5", "PLR_a", 5, SECRET, 600),
        _score("JOB_0", "PLR_a", 0, MISS, 100),
        _score("JOB_3", "PLR_a", 3, SECRET, 400),  # the best of round 0: earliest solve
        _score("JOB_4", "PLR_a", 4, SECRET, 500),
        _score("JOB_1", "PLR_a", 1, NEAR, 200),
        _score("JOB_r1", "PLR_a", 0, NEAR, 10_100, "RND_1"),
    ]
    assert await record_scores(engine, batch) == {s.job_id for s in batch}
    tables = await _tables(engine)
    assert tables["round_points"] == [
        ("PLR_a", "RND_0", rules.points_for(3, True), 3, "JOB_3", 400),
        ("PLR_a", "RND_1", 0, 0, "JOB_r1", 10_100),
    ]
    assert tables["totals"] == [("PLR_a", rules.points_for(3, True), 1, 400)]

    # A later batch with a worse solve and an earlier one: only the earlier one counts.
    worse = _score("JOB_6", "PLR_a", 6, SECRET, 700)
    better = _score("JOB_2", "PLR_a", 2, SECRET, 300)
    assert await record_scores(engine, [worse, better]) == {"JOB_6", "JOB_2"}
    tables = await _tables(engine)
    assert tables["round_points"][0] == ("PLR_a", "RND_0", rules.points_for(2, True), 2,
                                         "JOB_2", 300)  # fmt: skip
    assert tables["totals"] == [("PLR_a", rules.points_for(2, True), 1, 300)]


async def test_within_a_batch_the_first_delivery_of_a_job_wins(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0"])
    score = _score("JOB_1", "PLR_a", 0, SECRET, 100)
    assert await record_scores(engine, [_again(score, 3), score, _again(score, 4)]) == {"JOB_1"}
    assert await score_by_job(engine, "JOB_1") == _again(score, 3)
    assert (await _tables(engine))["totals"] == [("PLR_a", 110, 1, 100)]


async def test_an_empty_batch_writes_nothing(engine: AsyncEngine) -> None:
    assert await record_scores(engine, []) == set()


async def test_concurrent_overlapping_batches_lose_no_update(
    engine: AsyncEngine, database_url: str
) -> None:
    # Two "workers" write overlapping players and rounds in batches at the same time, with
    # duplicates: on PostgreSQL the lock order keeps them from deadlocking and the totals
    # lock from losing a round; on SQLite the single writer serialises them.
    players = [f"PLR_{i}" for i in range(4)]
    rounds = [f"RND_{i}" for i in range(3)]
    await _seed(engine, players, rounds)
    rnd = random.Random(7)
    scores = [
        _score(f"JOB_{r}{p}{seq}", pid, seq, SECRET if rnd.random() < 0.4 else NEAR,
               10_000 * r + 10 * seq + p, rid)
        for r, rid in enumerate(rounds) for p, pid in enumerate(players) for seq in range(4)
    ]  # fmt: skip
    deliveries = scores + [_again(s) for s in rnd.sample(scores, 16)]
    rnd.shuffle(deliveries)
    batches = [deliveries[i : i + 5] for i in range(0, len(deliveries), 5)]
    other = make_engine(database_url)
    try:
        written = await asyncio.gather(
            *(record_scores(other if i % 2 else engine, b) for i, b in enumerate(batches))
        )
    finally:
        await other.dispose()
    assert sorted(j for w in written for j in w) == sorted(s.job_id for s in scores)
    batched = await _tables(engine)

    await _wipe(engine)
    await _seed(engine, players, rounds)
    for s in deliveries:
        await legacy_record_score(engine, s)
    legacy = await _tables(engine)
    # Which delivery of a duplicated job got in first is a race: compare the rest of its row.
    del batched["scores"], legacy["scores"]
    assert batched == legacy


# --- the property: batching never changes the outcome --------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    players: tuple[str, ...]
    rounds: tuple[str, ...]
    deliveries: tuple[ScoreRecord, ...]  # every accepted guess, some again, in delivery order
    cuts: tuple[int, ...]  # batch boundaries, as indexes into deliveries

    def batches(self) -> Iterator[list[ScoreRecord]]:
        edges = [0, *self.cuts, len(self.deliveries)]
        for a, b in itertools.pairwise(edges):
            yield list(self.deliveries[a:b])


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    players = tuple(f"PLR_{i}" for i in range(draw(st.integers(1, 3))))
    rounds = tuple(f"RND_{i}" for i in range(draw(st.integers(1, 2))))
    guesses = st.sampled_from([SECRET, MISS, NEAR])
    scores = []
    for r, rid in enumerate(rounds):
        for p, pid in enumerate(players):
            n = draw(st.integers(0, 12))  # past the 10-point floor
            times = sorted(draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)))
            for seq in range(n):  # coarse times: players tie on acceptance now and then
                at = 10_000 * r + 100 * times[seq]
                scores.append(_score(f"JOB_{r}{p}{seq:02d}", pid, seq, draw(guesses), at, rid))
    again = draw(st.lists(st.sampled_from(scores), max_size=10)) if scores else []
    deliveries = draw(st.permutations(scores + [_again(s, 2 + i) for i, s in enumerate(again)]))
    cuts: set[int] = set()
    if len(deliveries) > 1:
        cuts = draw(st.sets(st.integers(1, len(deliveries) - 1), max_size=len(deliveries)))
    return Plan(players, rounds, tuple(deliveries), tuple(sorted(cuts)))


def _no_fsync(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous = OFF")
    cursor.close()


def _run_in_thread(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a private loop in a helper thread (for sync Hypothesis tests)."""

    async def main() -> T:
        return await fn()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result(timeout=120)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def shared_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """One database per backend for all examples of the property (wiped per example)."""
    if request.param == "postgres":
        cluster: PgCluster = request.getfixturevalue("pg_cluster")
        url = cluster.create_database()
    else:
        url = sqlite_url(tmp_path_factory.mktemp("batched"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(migrate, url).result(timeout=60)
    return url


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
@pytest.mark.slow
def test_batching_leaves_the_rows_one_at_a_time_writes_leave(
    shared_database_url: str, plan: Plan
) -> None:
    async def run() -> tuple[Any, Any, list[set[str]]]:
        engine = make_engine(shared_database_url)
        if engine.dialect.name == "sqlite":  # durability is not under test
            event.listen(engine.sync_engine, "connect", _no_fsync)
        try:
            await _wipe(engine)
            await _seed(engine, plan.players, plan.rounds)
            for s in plan.deliveries:
                await legacy_record_score(engine, s)
            one_by_one = await _tables(engine)

            await _wipe(engine)
            await _seed(engine, plan.players, plan.rounds)
            written = [await record_scores(engine, b) for b in plan.batches()]
            return one_by_one, await _tables(engine), written
        finally:
            await engine.dispose()

    one_by_one, batched, written = _run_in_thread(run)
    assert batched == one_by_one
    # Each job is reported written exactly once, by the batch that held its first delivery.
    reported = [j for w in written for j in w]
    assert sorted(reported) == sorted({s.job_id for s in plan.deliveries})


# --- PostgreSQL: a deadlock victim runs its batch again ---------------------------------------


@pytest.mark.postgres
async def test_a_batch_chosen_as_deadlock_victim_is_written_on_retry(pg_database_url: str) -> None:
    # Another session holds the round-points row the batch must raise, then inserts the
    # batch's own JOB id: a lock cycle. The batch waited first and checks for deadlocks
    # after 50 ms (the other session after 1 s), so the batch is the victim — and its
    # rerun, once the other session has rolled back, writes it.
    from codemojex.store import migrate_async

    await migrate_async(pg_database_url)
    engine = make_engine(
        pg_database_url, connect_args={"server_settings": {"deadlock_timeout": "50ms"}}
    )
    other = make_engine(pg_database_url)
    try:
        await _seed(engine, ["PLR_a"], ["RND_0"])
        await record_score(engine, _score("JOB_1", "PLR_a", 5, SECRET, 500))
        better = _score("JOB_2", "PLR_a", 1, SECRET, 100)
        async with other.connect() as x, engine.connect() as watch:
            await x.exec_driver_sql(
                "SELECT 1 FROM round_points WHERE player_id = 'PLR_a' FOR UPDATE"
            )
            batch = asyncio.create_task(record_scores(engine, [better]))
            while not (await watch.exec_driver_sql(
                "SELECT count(*) FROM pg_locks WHERE NOT granted"
            )).scalar_one():  # fmt: skip
                await watch.rollback()  # a fresh snapshot of pg_locks each time
                await asyncio.sleep(0.01)
            # Succeeds only if the batch's first transaction was rolled back as the victim.
            await x.exec_driver_sql(
                "INSERT INTO scores (job_id, round_id, player_id, seq, guess, exact, near, "
                "solved, points, accepted_at_ms, scored_at_ms, attempts, worker_id) VALUES "
                "('JOB_2', 'RND_0', 'PLR_a', 1, '[]', 0, 0, false, 0, 1, 1, 9, 'WRK_X')"
            )
            await x.rollback()
            assert await batch == {"JOB_2"}
        assert await score_by_job(engine, "JOB_2") == better
        assert (await _tables(engine))["totals"] == [("PLR_a", rules.points_for(1, True), 1, 100)]
    finally:
        await other.dispose()
        await engine.dispose()


async def test_the_sqlite_fallback_without_aiosqlite_internals_writes_the_same_rows(
    sqlite_database_url: str,
) -> None:
    # record_scores runs a SQLite batch in one trip to aiosqlite's thread through a private
    # method; should a new aiosqlite lack it, the public one-trip-per-statement path is used.
    from codemojex.store import migrate_async
    from codemojex.store.scores import _statements, _steps, _write_public

    await migrate_async(sqlite_database_url)
    engine = make_engine(sqlite_database_url)
    try:
        await _seed(engine, ["PLR_a", "PLR_b"], ["RND_0"])
        batch = [
            _score("JOB_1", "PLR_a", 0, NEAR, 100),
            _score("JOB_2", "PLR_a", 1, SECRET, 200),
            _score("JOB_3", "PLR_b", 0, SECRET, 300),
        ]
        for s in batch[:1]:
            await legacy_record_score(engine, s)
        expected_written = {"JOB_2", "JOB_3"}
        async with engine.connect() as conn:
            db = (await conn.get_raw_connection()).driver_connection
            steps = _steps(_statements("sqlite"), sorted(batch, key=lambda s: s.job_id))
            assert await _write_public(db, steps) == expected_written
        fallback = await _tables(engine)

        await _wipe(engine)
        await _seed(engine, ["PLR_a", "PLR_b"], ["RND_0"])
        for s in batch:
            await legacy_record_score(engine, s)
        assert fallback == await _tables(engine)

        # An error comes out as SQLAlchemy's and leaves nothing behind.
        async with engine.connect() as conn:
            db = (await conn.get_raw_connection()).driver_connection
            poison = _score("JOB_9", "PLR_a", 9, SECRET, 900, "RND_nope")
            with pytest.raises(IntegrityError):
                await _write_public(db, _steps(_statements("sqlite"), [poison]))
            assert not db.in_transaction
    finally:
        await engine.dispose()
