"""A lease shorter than the pulse rule's gap survives a freeze of the server shorter than
the gap: its holder still beats, so its expired lease waits up to a lapse for the renewal
queued behind the freeze instead of being reaped at once (lua/reap.lua). A real
valkey-server of its own, in ``tmp_path``, is stopped with SIGSTOP for 1.3 s while a
consumer with ``lease_ms=1000`` (default lapse 3 s, beat 1 s, pulse gap 1.5 s) runs."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

import redis.asyncio

import echomq
from echomq.server import EmbeddedValkey

FREEZE_S = 1.3


async def test_a_one_second_lease_is_not_reaped_across_a_short_freeze(tmp_path: Path) -> None:
    """The worst order after the freeze: a reap call sent as it began (so it lands first,
    past every deadline) and the pulse fresh just before it (no outage to detect)."""
    with EmbeddedValkey(tmp_path, appendfsync="everysec") as server:
        conn = redis.asyncio.Redis.from_url(server.url, socket_timeout=5)
        reaper = redis.asyncio.Redis.from_url(server.url, socket_timeout=5)
        try:
            q = echomq.Queue(conn, "freeze")
            jobs = [await q.lanes.enqueue(f"l{i}", {"i": i}) for i in range(4)]
            starts: Counter[str] = Counter()
            running = asyncio.Event()

            async def handler(claim: echomq.Claim) -> None:
                starts[claim.job_id] += 1
                running.set()
                await asyncio.sleep(FREEZE_S + 1.5)

            # The test plays the queue's reaper, with the consumer's own timings.
            consumer = echomq.Consumer(q, handler, lease_ms=1_000, concurrency=4, reaper=False)
            o = consumer.options
            rq = echomq.Queue(reaper, "freeze")

            async def sweep() -> list[str]:
                got = await rq.stalled.sweep(
                    "R",
                    o.reap_lock_ms,
                    o.lapse_ms,
                    margin_ms=o.reap_interval_ms,
                    gap_ms=o.pulse_gap_ms,
                )
                return got.moved

            task = asyncio.create_task(consumer.run())
            await asyncio.wait_for(running.wait(), 5)
            await asyncio.sleep(0.2)
            assert await sweep() == []  # the pulse is fresh: a freeze of 1.3 s is no outage
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:
                late = asyncio.create_task(sweep())
                await asyncio.sleep(FREEZE_S)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            moved = await late

            async def done() -> bool:
                return (await q.stats())["completed"] == len(jobs)

            for _ in range(200):
                if await done():
                    break
                await asyncio.sleep(0.05)
            stats = await q.stats()
            consumer.stop()
            await asyncio.wait_for(task, 20)
            assert moved == []
            assert stats["completed"] == len(jobs)
            assert stats["counters"].get("reaped", 0) == 0 and consumer.counts.lost == 0
            assert dict(starts) == {j: 1 for j in jobs}
        finally:
            await conn.aclose()
            await reaper.aclose()


async def test_an_expired_lease_of_a_beating_holder_is_reaped_after_a_lapse(
    q: echomq.Queue,
) -> None:
    """The deferral is bounded: a holder that beats but never renews loses its job one
    lapse (the sweep's horizon) past the lease; a holder that does not beat loses it at
    the lease; ``reap()`` without outage detection judges the lease alone."""
    lapse, gap = 3_000, 1_500
    await q.beat("alive", lapse, gap_ms=gap)
    await q.lanes.enqueue("a", {"a": 1})
    await q.lanes.enqueue("b", {"b": 1})
    mine = await q.lanes.claim("alive", 50)
    bare = await q.lanes.claim("bare", 50)  # no registry row: the lease is all there is
    assert mine is not None and bare is not None
    await asyncio.sleep(0.1)
    sweep = await q.stalled.sweep("R", 5_000, lapse, gap_ms=gap)
    assert sweep.moved == [bare.job_id]
    # Its deadline, one lapse on (the server answering all along).
    await q.conn.zadd(q.keys.active, {mine.job_id: mine.lease_until_ms - lapse})
    await q.beat("alive", lapse, gap_ms=gap)
    assert (await q.stalled.sweep("R", 5_000, lapse, gap_ms=gap)).moved == [mine.job_id]
    await q.lanes.enqueue("c", {"c": 1})
    again = await q.lanes.claim("alive", 50)
    assert again is not None
    await asyncio.sleep(0.1)
    assert await q.stalled.reap() == [again.job_id]
