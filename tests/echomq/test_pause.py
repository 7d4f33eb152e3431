"""Pause and resume: while paused claims hand out nothing (plain, lanes, batches), enqueues
still land, due jobs wait and parked consumers stay parked; resume wakes them. On one
node and on Valkey Cluster."""

from __future__ import annotations

import asyncio
import time

import pytest

import echomq

pytestmark = pytest.mark.parametrize("valkey_backend", ("single", "cluster"), indirect=True)

LEASE = 5_000


async def test_a_paused_queue_hands_out_nothing_and_takes_enqueues(q: echomq.Queue) -> None:
    assert await q.pause()
    assert not await q.pause()  # already paused
    assert (await q.stats())["paused"]
    await q.jobs.enqueue("plain")
    await q.lanes.enqueue("a", "lane")
    await q.jobs.enqueue("later", delay_ms=1)
    await asyncio.sleep(0.05)
    assert await q.jobs.claim("w", LEASE) is None
    assert await q.lanes.claim("w", LEASE) is None
    for side in (q.jobs, q.lanes):
        batch = await side.claim_many("w", LEASE, 10)
        assert batch.claims == [] and batch.next_due_ms is None  # nothing to wake for
    stats = await q.stats()
    assert stats["pending"] == 2 and stats["scheduled"] == 1 and stats["active"] == 0
    assert await q.resume()
    assert not await q.resume()
    assert not (await q.stats())["paused"]
    assert [c.payload for c in (await q.jobs.claim_many("w", LEASE, 10)).claims] == [
        "plain",
        "later",
    ]
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.payload == "lane"


async def test_a_job_leased_before_the_pause_still_completes(q: echomq.Queue) -> None:
    await q.jobs.enqueue("x")
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    await q.pause()
    assert await q.jobs.extend(c.job_id, c.token, LEASE)
    assert await q.jobs.complete(c.job_id, c.token)
    await q.resume()


async def test_parked_consumers_stay_parked_and_resume_within_one_wake(q: echomq.Queue) -> None:
    seen: list[float] = []

    async def handler(claim: echomq.Claim) -> None:
        seen.append(time.monotonic())

    consumers = [echomq.Consumer(q, handler, lease_ms=LEASE, source="lanes") for _ in range(2)]
    tasks = [asyncio.create_task(c.run()) for c in consumers]
    try:
        await q.pause()
        await asyncio.sleep(0.3)
        for i in range(6):
            await q.lanes.enqueue(f"l{i % 3}", i)
        await asyncio.sleep(0.8)
        assert seen == []
        assert (await q.stats())["pending"] == 6
        t0 = time.monotonic()
        await q.resume()
        for _ in range(100):
            if len(seen) == 6:
                break
            await asyncio.sleep(0.02)
        assert len(seen) == 6
        assert seen[0] - t0 < 0.5  # the resume's wake, not a park's timeout (15 s)
    finally:
        for c in consumers:
            c.stop()
        await asyncio.gather(*tasks)
