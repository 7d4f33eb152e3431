"""``echomq.admin``: the cheap operator reads (dead count, dead ids before a time, workers
registered) against the real server."""

from __future__ import annotations

import asyncio

import pytest

import echomq
import echomq.admin


async def kill(q: echomq.Queue, n: int) -> list[str]:
    """``n`` jobs failed with one delivery each: dead, oldest death first."""
    ids = []
    for i in range(n):
        jid = await q.jobs.enqueue(i, max_attempts=1)
        claim = await q.jobs.claim("WRK_t", 10_000)
        assert claim is not None and claim.job_id == jid
        assert await q.jobs.fail(jid, claim.token, "boom") == "dead"
        ids.append(jid)
        await asyncio.sleep(0.002)  # distinct death times (ms scores)
    return ids


async def test_dead_count_and_dead_before_read_the_dead_oldest_first(q: echomq.Queue) -> None:
    assert await echomq.admin.dead_count(q) == 0
    assert await echomq.admin.dead_before(q, 2**50) == []
    ids = await kill(q, 5)
    assert await echomq.admin.dead_count(q) == 5
    assert await echomq.admin.dead_before(q, 2**50) == ids
    assert await echomq.admin.dead_before(q, 2**50, limit=2) == ids[:2]
    died = [info.finished_at_ms for info in await q.jobs.dead(10)]
    assert all(d is not None for d in died)
    third = died[2]
    assert third is not None
    assert await echomq.admin.dead_before(q, third) == ids[:3]  # at or before
    assert await echomq.admin.dead_before(q, 0) == []
    await q.jobs.retry_dead(ids[0])
    assert await echomq.admin.dead_count(q) == 4
    with pytest.raises(ValueError):
        await echomq.admin.dead_before(q, -1)
    with pytest.raises(ValueError):
        await echomq.admin.dead_before(q, 1, limit=0)


async def test_worker_count_counts_registered_workers(q: echomq.Queue) -> None:
    assert await echomq.admin.worker_count(q) == 0
    await q.heartbeat("WRK_a", 5_000)
    await q.heartbeat("WRK_b", 5_000)
    assert await echomq.admin.worker_count(q) == 2
    await q.unregister("WRK_a")
    assert await echomq.admin.worker_count(q) == 1
