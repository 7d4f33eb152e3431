"""Transitions under faults they did not handle before (issue 11): malformed rows, a
release racing a reclaim, re-sent completions, the backoff cap, expired worker rows."""

from __future__ import annotations

import asyncio

import pytest

import echomq
from tests.echomq.conftest import locations, snapshot

LEASE = 60_000


async def test_a_malformed_row_does_not_make_a_claim_batch_vanish(q: echomq.Queue) -> None:
    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(3)]
    # What jobs.enqueue(..., attempts=1.0) used to store: HINCRBY refuses it.
    await q.conn.hset(q.keys.job(ids[1]), "attempts", "1.0")
    batch = await q.lanes.claim_many("w", LEASE, 3)
    assert sorted(c.job_id for c in batch.claims) == sorted([ids[0], ids[2]])
    assert all(c.token == 1 for c in batch.claims)
    state, reason = await q.conn.hmget(q.keys.job(ids[1]), "state", "reason")
    assert (state, reason) == (b"dead", b"malformed row")
    for jid, where in zip(ids, (["active"], ["dead"], ["active"]), strict=True):
        assert await locations(q, jid) == where
    assert await q.lanes.load("l1") == 0
    events = [(e.type, e.job_id) for e in await q.events.since("0-0")]
    assert ("dead", ids[1]) in events


async def test_a_claim_drops_an_id_whose_row_is_gone_or_not_a_hash(q: echomq.Queue) -> None:
    ids = [await q.jobs.enqueue(i) for i in range(3)]
    await q.conn.delete(q.keys.job(ids[0]))
    await q.conn.delete(q.keys.job(ids[1]))
    await q.conn.set(q.keys.job(ids[1]), "not a row")
    batch = await q.jobs.claim_many("w", LEASE, 3)
    assert [c.job_id for c in batch.claims] == [ids[2]]
    assert await q.conn.exists(q.keys.job(ids[0])) == 0  # no row conjured for a ghost
    assert (await q.stats())["counters"]["dropped"] == 2


async def test_a_malformed_row_does_not_stop_the_reaper(q: echomq.Queue) -> None:
    a = await q.jobs.enqueue("a")
    b = await q.jobs.enqueue("b")
    batch = await q.jobs.claim_many("w", 100, 2)
    assert len(batch.claims) == 2
    await q.conn.hset(q.keys.job(a), "stalls", "x")
    await asyncio.sleep(0.15)
    assert sorted(await q.stalled.reap()) == sorted([a, b])
    assert await locations(q, a) == ["dead"] and await locations(q, b) == ["pending"]


async def test_release_of_orphans_never_releases_another_workers_lease(
    q: echomq.Queue,
) -> None:
    """The consumer reads the token of a job it was leased by a lost claim answer from the
    row; by then the job may be reaped and leased to someone else under that very token."""
    jid = await q.jobs.enqueue("x")
    c1 = await q.jobs.claim("w1", 100)
    assert c1 is not None
    await asyncio.sleep(0.15)
    assert await q.stalled.reap() == [jid]
    c2 = await q.jobs.claim("w2", LEASE)
    assert c2 is not None and c2.token == 2
    # w1 still believes it holds the job (its wjobs entry as a lost answer leaves it).
    await q.conn.sadd(q.keys.worker_jobs("w1"), jid)
    w1 = echomq.Consumer(q, lambda c: asyncio.sleep(0), worker_id="w1")
    await w1._release_orphans()
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "active" and info.worker_id == "w2"
    assert w1.counts.released == 0
    # Its own orphan it does hand back.
    await q.conn.srem(q.keys.worker_jobs("w1"), jid)
    mine = await q.jobs.enqueue("y")
    assert (await q.jobs.claim("w1", LEASE)) is not None
    await w1._release_orphans()
    assert w1.counts.released == 1 and await locations(q, mine) == ["pending"]
    assert await q.jobs.release(jid, c2.token, worker_id="w1") is False
    assert await q.jobs.release(jid, c2.token, worker_id="w2") is True


async def test_the_next_claim_after_a_release_carries_token_plus_one(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x")
    for expected in (1, 2, 3):
        c = await q.lanes.claim("w", LEASE)
        assert c is not None and c.job_id == jid and c.token == expected
        assert await q.jobs.release(jid, c.token)
        info = await q.jobs.get(jid)
        assert info is not None and info.attempts == expected  # deliveries so far
        for stale in (c.token, c.token + 1):  # the old token (by state), a future one
            assert not await q.jobs.complete(jid, stale)
            assert await q.jobs.fail(jid, stale, "late") == "stale"


async def test_a_repeated_completion_batch_reports_true_and_counts_once(
    q: echomq.Queue,
) -> None:
    ids = [await q.jobs.enqueue(i) for i in range(4)]
    batch = await q.jobs.claim_many("w", LEASE, 4)
    items = [(c.job_id, c.token, {"n": c.payload}) for c in batch.claims]
    assert await q.jobs.complete_many(items[:2]) == [True, True]
    # The reply to that batch was lost; the consumer sends all four.
    assert await q.jobs.complete_many(items) == [True] * 4
    stats = await q.stats()
    assert stats["counters"]["completed"] == 4 and stats["completed"] == 4
    events = [e for e in await q.events.since("0-0") if e.type == "completed"]
    assert sorted(e.job_id for e in events) == sorted(ids)
    assert "complete" not in stats["refused"]


@pytest.mark.parametrize(
    ("factor", "first", "plateau"),
    [
        (0.0, 500, 50_000),  # no jitter: 0.5 s doubling, levelling off at cap / 1.2
        (1.0, 600, 60_000),  # the most jitter: +20 %, never past the cap
        (-1.0, 400, 40_000),
    ],
)
async def test_backoff_doubles_from_the_base_and_the_cap_holds_jitter_included(
    q: echomq.Queue,
    monkeypatch: pytest.MonkeyPatch,
    factor: float,
    first: int,
    plateau: int,
) -> None:
    monkeypatch.setattr(echomq.jobs.random, "uniform", lambda a, b: factor)
    jid = await q.jobs.enqueue("x", max_attempts=20)
    delays = []
    for _ in range(12):
        await q.conn.zadd(q.keys.scheduled, {jid: 0}, xx=True)  # due now
        c = await q.jobs.claim("w", LEASE)
        assert c is not None
        before = await q.server_time_ms()
        assert await q.jobs.fail(jid, c.token, "boom") == "scheduled"
        after = await q.server_time_ms()
        due = int(await q.conn.zscore(q.keys.scheduled, jid))
        delays.append((due - after, due - before))
    for n, (low, high) in enumerate(delays):
        expected = min(first * 2**n, plateau)
        assert low <= expected <= high, (n, expected, low, high)
        assert low <= 60_000
    assert delays[-1][0] <= plateau <= delays[-1][1]


async def test_a_reap_does_not_resurrect_an_expired_worker_row(q: echomq.Queue) -> None:
    await q.heartbeat("w", 50, {"pid": 1}, ttl_ms=100)
    await asyncio.sleep(0.2)  # the beat lapsed and the description expired
    assert await q.conn.exists(q.keys.worker("w")) == 0
    await q.stalled.reap()
    assert await q.conn.exists(q.keys.worker("w")) == 0
    assert await q.conn.zscore(q.keys.workers, "w") is None
    # A description still alive is marked lapsed, and keeps its TTL.
    await q.heartbeat("v", 50, {"pid": 2}, ttl_ms=60_000)
    await asyncio.sleep(0.1)
    await q.stalled.reap()
    assert await q.conn.hget(q.keys.worker("v"), "lapsed") is not None
    assert 0 < await q.conn.pttl(q.keys.worker("v")) <= 60_000


async def test_a_stale_call_on_a_released_job_changes_nothing(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x")
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and await q.jobs.release(jid, c.token)
    before = await snapshot(q)
    assert await q.jobs.extend(jid, c.token, LEASE) is False
    after = await snapshot(q)
    after.pop(q.keys.refused)
    before.pop(q.keys.refused, None)
    assert before == after
