"""echomq.registry: the worker registry read back, as consumers and the reaper leave it."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

import echomq
from echomq import registry


async def test_a_beating_worker_is_listed_with_its_description(q: echomq.Queue) -> None:
    now = await q.heartbeat("WRK_a", 3_000, {"pid": 42, "host": "h1", "state": "busy"})
    await q.heartbeat("WRK_b", 5_000, {"jobs": "JOB_1,JOB_2", "jobs_done": 7, "colour": "red"})

    rows = await registry.workers(q)
    assert [w.worker_id for w in rows] == ["WRK_a", "WRK_b"]  # heartbeat deadline order
    a, b = rows
    assert a.alive and a.deadline_ms is not None and a.deadline_ms >= now + 3_000
    assert (a.pid, a.host, a.state, a.jobs, a.jobs_done) == (42, "h1", "busy", (), 0)
    assert a.beat_ms == now and a.lapse_ms == 3_000
    assert (a.lapsed_ms, a.stopped_ms, a.waiting_for) == (None, None, None)
    assert b.jobs == ("JOB_1", "JOB_2") and b.jobs_done == 7 and b.pid is None
    assert b.meta["colour"] == "red"  # fields the registry does not name are kept
    assert await registry.worker(q, "WRK_b") == b


async def test_a_stopped_worker_is_described_but_not_alive(q: echomq.Queue) -> None:
    await q.heartbeat("WRK_a", 3_000, {"pid": 42})
    assert await q.unregister("WRK_a")
    assert await registry.workers(q) == []
    w = await registry.worker(q, "WRK_a")
    assert w is not None and not w.alive and w.deadline_ms is None
    assert w.stopped_ms is not None and w.pid == 42


async def test_a_lapsed_worker_is_reaped_from_the_list_and_marked(q: echomq.Queue) -> None:
    await q.heartbeat("WRK_a", 1, {"pid": 42})
    await asyncio.sleep(0.05)
    await q.stalled.reap()
    assert await registry.workers(q) == []
    w = await registry.worker(q, "WRK_a")
    assert w is not None and not w.alive and w.lapsed_ms is not None


async def test_an_unknown_worker_is_none(q: echomq.Queue) -> None:
    assert await registry.worker(q, "WRK_nobody") is None
    assert await registry.workers(q) == []


async def test_a_running_consumer_describes_itself(q: echomq.Queue) -> None:
    release = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        await release.wait()

    c = echomq.Consumer(q, handler, heartbeat_ms=100, meta=lambda: {"role": "mailer"})
    task = asyncio.create_task(c.run())
    try:
        job_id = await q.lanes.enqueue("lane", 1)
        for _ in range(500):
            found = await registry.workers(q)
            if found and found[0].jobs == (job_id,):
                break
            await asyncio.sleep(0.02)
        (w,) = found
        assert w.worker_id == c.worker_id and w.alive and w.jobs == (job_id,)
        assert (w.pid, w.host, w.state) == (os.getpid(), socket.gethostname(), "busy")
        assert w.meta["role"] == "mailer"
    finally:
        release.set()
        c.stop()
        await asyncio.wait_for(task, 20)
    gone = await registry.worker(q, c.worker_id)
    assert gone is not None and not gone.alive and gone.stopped_ms is not None


async def test_a_partitioned_queue_lists_each_worker_once(redis_conn: Any, queue_name: str) -> None:
    p = echomq.Partitioned(redis_conn, queue_name, 3)
    for part in p.partitions:  # as a PartitionedConsumer registers: one id everywhere
        await part.heartbeat("WRK_p", 3_000, {"pid": 7})
    await p.partitions[2].heartbeat("WRK_only2", 3_000, {"pid": 8})
    rows = await registry.workers(p)
    assert sorted(w.worker_id for w in rows) == ["WRK_only2", "WRK_p"]
    await p.partitions[0].unregister("WRK_p")  # still registered on partitions 1 and 2
    w = await registry.worker(p, "WRK_p")
    assert w is not None and w.alive and w.pid == 7
    assert await registry.worker(p, "WRK_none") is None


async def test_registry_reads_refuse_what_is_not_a_queue() -> None:
    with pytest.raises(TypeError):
        await registry.workers("guesses")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await registry.worker(echomq.Queue(None, "q"), "")
