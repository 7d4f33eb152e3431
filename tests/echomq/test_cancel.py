"""Cancel, on Valkey and Valkey Cluster: every state it takes a job from, the counts a
lane job leaves exact, and a running job's holder refused and its handler cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
from echomq.partitions import Partitioned
from echomq.settings import Settings
from tests.echomq.conftest import locations

pytestmark = pytest.mark.parametrize("valkey_backend", ["single", "cluster"], indirect=True)

LEASE = 5_000


async def _cancelled_once(q: echomq.Queue, job_id: str) -> None:
    assert await q.jobs.cancel(job_id) is True
    assert await q.jobs.cancel(job_id) is False  # already cancelled: counted once
    info = await q.jobs.get(job_id)
    assert info is not None and info.state == "cancelled" and info.finished_at_ms
    assert await locations(q, job_id) == ["cancelled"]
    assert await q.conn.zscore(q.keys.cancelled, job_id) == info.finished_at_ms
    events = [e for e in await q.events.since("0-0") if e.job_id == job_id]
    assert [e.type for e in events if e.type == "cancelled"] == ["cancelled"]


async def test_a_plain_pending_job_is_cancelled_once(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue({"n": 1})
    await _cancelled_once(q, jid)
    stats = await q.stats()
    assert stats["pending"] == 0 and stats["counters"]["cancelled"] == 1
    assert await q.jobs.claim("w", LEASE) is None


async def test_a_delayed_job_is_cancelled(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue(1, delay_ms=60_000)
    await _cancelled_once(q, jid)
    assert (await q.stats())["scheduled"] == 0
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "cancelled"


async def test_a_retrying_lane_job_is_cancelled_and_leaves_its_open_index(
    q: echomq.Queue,
) -> None:
    jid = await q.lanes.enqueue("a", 1)
    claim = await q.lanes.claim("w", LEASE)
    assert claim is not None
    assert await q.jobs.fail(jid, claim.token, "boom", retry_in_ms=60_000) == "scheduled"
    assert len(await q.lanes.unfinished("a")) == 1
    await _cancelled_once(q, jid)
    assert len(await q.lanes.unfinished("a")) == 0
    assert await q.conn.exists(q.keys.open("a")) == 0


async def test_unknown_finished_and_dead_jobs_are_not_cancelled(q: echomq.Queue) -> None:
    assert await q.jobs.cancel("JOB_NOPE") is False
    done = await q.jobs.enqueue(1)
    claim = await q.jobs.claim("w", LEASE)
    assert claim is not None and await q.jobs.complete(done, claim.token, "r")
    dead = await q.jobs.enqueue(2, max_attempts=1)
    claim = await q.jobs.claim("w", LEASE)
    assert claim is not None and await q.jobs.fail(dead, claim.token, "x") == "dead"
    assert await q.jobs.cancel(done) is False
    assert await q.jobs.cancel(dead) is False
    stats = await q.stats()
    assert "cancelled" not in stats["counters"] and stats["completed"] == 1 and stats["dead"] == 1
    with pytest.raises(TypeError):
        await q.jobs.cancel(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await q.jobs.cancel("")


async def test_cancelling_lane_jobs_keeps_depths_counts_and_fair_lists_exact(
    q: echomq.Queue,
) -> None:
    a = [await q.lanes.enqueue("a", i) for i in range(3)]
    b = [await q.lanes.enqueue("b", i) for i in range(2)]
    # counted against subject "s" while waiting in lane "c": foreign count and open index
    c = (await q.lanes.submit("c", 0, load_subject="s")).job_id
    assert await q.jobs.cancel(a[1])
    assert await q.lanes.depth("a") == 2
    stats = await q.stats()
    assert stats["pending"] == 5 and stats["lanes"] == {"a": 2, "b": 2, "c": 1}
    for jid in b:
        assert await q.jobs.cancel(jid)
    assert await q.jobs.cancel(c)
    stats = await q.stats()
    assert stats["pending"] == 2 and stats["lanes"] == {"a": 2} and stats["lane_count"] == 1
    assert int(await q.conn.get(q.keys.in_lanes)) == 2
    assert await q.conn.hget(q.keys.foreign, "c") is None
    assert await q.conn.exists(q.keys.open("s")) == 0
    # an emptied lane that fills again is one activation, claimed once per job
    again = await q.lanes.enqueue("b", 9)
    got = [c.job_id for c in (await q.lanes.claim_many("w", LEASE, 10)).claims]
    assert sorted(got) == sorted([a[0], a[2], again]) and len(got) == 3
    assert (await q.stats())["pending"] == 0


async def test_a_running_job_is_cancelled_and_its_holder_is_stale(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("a", 1)
    claim = await q.lanes.claim("w", LEASE)
    assert claim is not None and len(await q.lanes.unfinished("a")) == 1
    await _cancelled_once(q, jid)
    assert await q.jobs.complete(jid, claim.token, "late") is False
    assert await q.jobs.fail(jid, claim.token, "late") == "stale"
    assert await q.jobs.extend(jid, claim.token, LEASE) is False
    assert await q.jobs.release(jid, claim.token) is False
    assert await claim.progress(0.5) is False
    stats = await q.stats()
    assert stats["active"] == 0 and stats["completed"] == 0
    assert stats["refused"] == {"complete": 1, "fail": 1, "extend": 1, "release": 1, "progress": 1}
    assert await q.conn.scard(q.keys.worker_jobs("w")) == 0
    assert len(await q.lanes.unfinished("a")) == 0
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "cancelled" and info.result is None
    assert info.worker_id is None and info.lease_until_ms is None


async def test_a_cancelled_jobs_handler_is_cancelled_at_its_next_renewal(
    q: echomq.Queue,
) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def handler(claim: echomq.Claim) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "finished"

    jid = await q.jobs.enqueue(1)
    consumer = echomq.Consumer(q, handler, lease_ms=900, source="jobs")
    runner = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        assert await q.jobs.cancel(jid)
        await asyncio.wait_for(stopped.wait(), 10)  # renewals run every third of the lease
    finally:
        consumer.stop()
        await asyncio.wait_for(runner, 10)
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "cancelled" and info.result is None
    stats = await q.stats()
    assert stats["counters"].get("completed", 0) == 0 and stats["counters"].get("failed", 0) == 0


async def test_a_partitioned_queues_job_is_cancelled_where_it_lives(
    redis_conn: Any, queue_name: str
) -> None:
    pq = Partitioned(redis_conn, queue_name, 4)
    ids = [await pq.enqueue(f"lane{i}", i) for i in range(8)]
    for jid in ids:
        assert await pq.cancel(jid)
    assert await pq.cancel(ids[0]) is False
    assert await pq.cancel("JOB_NOPE") is False
    stats = await pq.stats()
    assert stats["pending"] == 0 and stats["counters"]["cancelled"] == 8


async def test_cancelled_rows_are_retained_as_completed_ones_are(
    redis_conn: Any, queue_name: str
) -> None:
    q = echomq.Queue(redis_conn, queue_name, Settings(keep_completed=3))
    ids = [await q.jobs.enqueue(i) for i in range(6)]
    for jid in ids:
        assert await q.jobs.cancel(jid)
    kept = [k.decode() for k in await q.conn.zrange(q.keys.cancelled, 0, -1)]
    assert kept == ids[3:]
    assert [await q.jobs.get(j) is None for j in ids] == [True] * 3 + [False] * 3
    assert (await q.stats())["counters"]["cancelled"] == 6
