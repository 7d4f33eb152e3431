"""GroupCommit: concurrent score writes share transactions without sharing their fates
beyond what they must, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex import rules
from codemojex.store import (
    GroupCommit,
    GroupCommitClosed,
    Round,
    ScoreRecord,
    create_player,
    hash_token,
    leaderboard,
    make_engine,
    save_round,
    score_by_job,
)

SECRET = ("🍎", "🍌", "🍇", "🍒")
MISS = ("🍑", "🍑", "🍑", "🍑")


def _score(job_id: str, player_id: str, seq: int, solved: bool, round_id: str = "RND_0",
           attempts: int = 1) -> ScoreRecord:  # fmt: skip
    guess = SECRET if solved else MISS
    fb = rules.feedback(SECRET, guess)
    return ScoreRecord(
        job_id=job_id, round_id=round_id, player_id=player_id, seq=seq, guess=guess,
        exact=fb.exact, near=fb.near, solved=fb.solved,
        points=rules.points_for(seq, fb.solved), accepted_at_ms=100 + seq,
        scored_at_ms=200 + seq, attempts=attempts, worker_id=f"WRK_{attempts}",
    )  # fmt: skip


async def _seed(engine: AsyncEngine, players: list[str]) -> None:
    for i, pid in enumerate(players):
        await create_player(engine, f"p{i}", hash_token(pid), 1, player_id=pid)
    await save_round(engine, Round("RND_0", 4, rules.DEFAULT_PALETTE, SECRET, 0, 10_000))


async def test_concurrent_writes_share_batches_and_count_each_job_once(
    engine: AsyncEngine,
) -> None:
    players = [f"PLR_{i}" for i in range(5)]
    await _seed(engine, players)
    scores = [_score(f"JOB_{p}{s}", pid, s, s == 2) for p, pid in enumerate(players)
              for s in range(6)]  # fmt: skip
    # Every job delivered twice, the second time by "another worker", all at once.
    writes = scores + [dataclasses.replace(s, attempts=2) for s in scores]
    group = GroupCommit(engine)
    results = await asyncio.gather(*(group.write(s) for s in writes))

    assert results == [True] * len(scores) + [False] * len(scores)
    assert group.records == len(writes) and group.batches < len(writes)
    assert await score_by_job(engine, "JOB_32") == scores[3 * 6 + 2]  # the first delivery
    board = await leaderboard(engine)
    assert {p["player_id"]: p["points"] for p in board} == {
        pid: rules.points_for(2, True) for pid in players
    }
    # Later writes of the same jobs, one by one: still written once.
    assert await group.write(dataclasses.replace(scores[0], attempts=3)) is False
    await group.close()


async def test_batches_are_bounded(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"])
    group = GroupCommit(engine, max_batch=4)
    results = await asyncio.gather(*(group.write(_score(f"JOB_{i:02d}", "PLR_a", i, False))
                                     for i in range(10)))  # fmt: skip
    assert all(results)
    assert group.batches >= 3 and group.records == 10


async def test_a_failed_batch_fails_every_waiter(sqlite_database_url: str) -> None:
    # No tables: the whole batch fails, and every handler learns it (EchoMQ retries each).
    engine = make_engine(sqlite_database_url)
    try:
        group = GroupCommit(engine)
        results = await asyncio.gather(
            *(group.write(_score(f"JOB_{i}", "PLR_a", i, True)) for i in range(3)),
            return_exceptions=True,
        )
        assert [type(r) for r in results] == [OperationalError] * 3
    finally:
        await engine.dispose()


async def test_a_poison_record_fails_alone(engine: AsyncEngine) -> None:
    # A score for a round the database does not know breaks its foreign key: only its own
    # waiter may get the error, the guesses that shared its batch are written.
    await _seed(engine, ["PLR_a"])
    group = GroupCommit(engine)
    good = [_score(f"JOB_{i}", "PLR_a", i, i == 1) for i in range(4)]
    poison = _score("JOB_x", "PLR_a", 9, True, round_id="RND_nope")
    results = await asyncio.gather(
        *(group.write(s) for s in [good[0], good[1], poison, good[2], good[3]]),
        return_exceptions=True,
    )
    assert results[:2] == [True, True] and results[3:] == [True, True]
    assert isinstance(results[2], IntegrityError)
    assert await score_by_job(engine, "JOB_x") is None
    assert (await leaderboard(engine))[0]["points"] == rules.points_for(1, True)


async def test_a_cancelled_waiter_does_not_break_its_batch(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"])
    group = GroupCommit(engine)
    scores = [_score(f"JOB_{i}", "PLR_a", i, False) for i in range(6)]
    tasks = [asyncio.create_task(group.write(s)) for s in scores]
    await asyncio.sleep(0)  # every write is pending; the flusher has not run yet
    tasks[1].cancel()  # pending: it is dropped, never written
    await asyncio.sleep(0)  # the flusher took the batch and is writing it
    tasks[4].cancel()  # in flight: written, the answer goes nowhere
    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert [type(r) for r in results] == [bool, asyncio.CancelledError, bool, bool,
                                          asyncio.CancelledError, bool]  # fmt: skip
    assert [r for r in results if isinstance(r, bool)] == [True] * 4
    assert await score_by_job(engine, "JOB_1") is None
    assert await score_by_job(engine, "JOB_4") == scores[4]
    assert await group.write(scores[1]) is True  # redelivered later: written then


async def test_close_waits_for_the_batch_in_flight_then_refuses(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"])
    group = GroupCommit(engine)
    tasks = [asyncio.create_task(group.write(_score(f"JOB_{i}", "PLR_a", i, True)))
             for i in range(3)]  # fmt: skip
    await asyncio.sleep(0)
    await group.close()
    assert all(t.done() for t in tasks) and [t.result() for t in tasks] == [True] * 3
    with pytest.raises(GroupCommitClosed):
        await group.write(_score("JOB_9", "PLR_a", 9, True))
    await group.close()  # idempotent


# --- SQLite: score writers of one file take turns on a kernel lock ----------------------------


async def _sqlite_engine(url: str) -> AsyncEngine:
    from codemojex.store import migrate_async

    await migrate_async(url)
    return make_engine(url)


async def test_sqlite_score_writers_take_turns_on_the_lock_file(sqlite_database_url: str) -> None:
    import fcntl
    import os

    engine = await _sqlite_engine(sqlite_database_url)
    # Another process's writer, as far as flock is concerned: its own open file description.
    other = os.open(f"{engine.url.database}-scorer.lock", os.O_RDWR | os.O_CREAT)
    try:
        await _seed(engine, ["PLR_a"])
        fcntl.flock(other, fcntl.LOCK_EX)
        group = GroupCommit(engine)
        first = asyncio.create_task(group.write(_score("JOB_1", "PLR_a", 0, False)))
        await asyncio.sleep(0.2)
        assert not first.done()  # waiting its turn, not in SQLite's busy handler
        later = [asyncio.create_task(group.write(_score(f"JOB_{i}", "PLR_a", i, False)))
                 for i in (2, 3)]  # fmt: skip
        await asyncio.sleep(0)
        fcntl.flock(other, fcntl.LOCK_UN)
        assert await asyncio.gather(first, *later) == [True, True, True]
        assert group.batches == 1  # what arrived while it waited went in the same commit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and it let go
    finally:
        os.close(other)
        await engine.dispose()


async def test_a_stuck_lock_holder_delays_sqlite_score_writes_no_longer_than_busy_timeout(
    sqlite_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl
    import os

    from codemojex.store import _sqlite_writer

    monkeypatch.setattr(_sqlite_writer, "SQLITE_BUSY_TIMEOUT_MS", 100)
    engine = await _sqlite_engine(sqlite_database_url)
    other = os.open(f"{engine.url.database}-scorer.lock", os.O_RDWR | os.O_CREAT)
    try:
        await _seed(engine, ["PLR_a"])
        fcntl.flock(other, fcntl.LOCK_EX)
        # The holder never lets go: after the busy timeout the write goes ahead without the
        # lock (SQLite's own locking still keeps it correct).
        assert await GroupCommit(engine).write(_score("JOB_1", "PLR_a", 0, True)) is True
        fcntl.flock(other, fcntl.LOCK_UN)
        # The lock thread still got the lock once it was free, and handed it straight back.
        for _ in range(100):
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(0.01)
        else:
            pytest.fail("the writer lock was never handed back")
        fcntl.flock(other, fcntl.LOCK_UN)
        assert await GroupCommit(engine).write(_score("JOB_2", "PLR_a", 1, False)) is True
    finally:
        os.close(other)
        await engine.dispose()


async def test_a_linger_gathers_writes_spread_over_it_into_one_commit(
    engine: AsyncEngine,
) -> None:
    """Five scores 20 ms apart, which without a linger commit one by one (each commit is
    done before the next score arrives): with a 200 ms linger all five share one commit,
    and none resolves before the linger is over."""
    linger_ms = 200
    await _seed(engine, ["PLR_l"])
    group = GroupCommit(engine, linger_ms=linger_ms)
    loop = asyncio.get_running_loop()
    began = loop.time()
    writes = []
    for s in range(5):
        writes.append(asyncio.ensure_future(group.write(_score(f"JOB_l{s}", "PLR_l", s, False))))
        await asyncio.sleep(0.02)
    assert await asyncio.gather(*writes) == [True] * 5
    took = loop.time() - began
    await group.close()
    assert (group.batches, group.records) == (1, 5)
    assert took >= linger_ms / 1000


def test_a_negative_linger_is_refused(engine: AsyncEngine) -> None:
    with pytest.raises(ValueError, match="linger_ms"):
        GroupCommit(engine, linger_ms=-1)
