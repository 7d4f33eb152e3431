"""Delays and run-at on the server clock, for plain jobs and lanes: a delayed lane job
waits in ``scheduled`` and enters its lane when due, activating it; a parked consumer
wakes by the earliest due time, with no poll. On one node and on Valkey Cluster."""

from __future__ import annotations

import asyncio
import time

import pytest

import echomq
from tests.echomq.conftest import locations

pytestmark = pytest.mark.parametrize("valkey_backend", ("single", "cluster"), indirect=True)

LEASE = 5_000


async def test_run_at_on_the_server_clock_schedules_a_plain_job(q: echomq.Queue) -> None:
    now = await q.server_time_ms()
    jid = await q.jobs.enqueue("x", run_at_ms=now + 400)
    assert await locations(q, jid) == ["scheduled"]
    assert await q.conn.zscore(q.keys.scheduled, jid) == now + 400
    assert await q.jobs.claim("w", LEASE) is None
    await asyncio.sleep(0.5)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == jid


async def test_a_run_at_already_past_is_now(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue("x", run_at_ms=1)
    assert await locations(q, jid) == ["pending"]
    lane_job = await q.lanes.enqueue("a", "y", run_at_ms=1)
    assert await locations(q, lane_job) == ["lane:a"]


async def test_a_delayed_lane_job_waits_then_enters_its_lane(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("a", "x", delay_ms=300, priority=2)
    assert await locations(q, jid) == ["scheduled"]
    assert (await q.jobs.get(jid)).state == "scheduled"  # type: ignore[union-attr]
    assert await q.lanes.load("a") == 1  # it counts against max_pending while it waits
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit("a", "y", max_pending=1)
    assert await q.lanes.claim("w", LEASE) is None
    await asyncio.sleep(0.4)
    assert await q.promote() == 1
    assert await locations(q, jid) == ["lane:a"]
    assert [text(x) for x in await q.conn.lrange(q.keys.new, 0, -1)] == ["a"]  # activated
    assert await q.conn.zscore(q.keys.lane("a"), jid) == -2  # with its priority
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.job_id == jid and c.lane == "a"
    assert await q.jobs.complete(c.job_id, c.token)
    assert await q.lanes.load("a") == 0


async def test_a_delayed_lane_job_of_another_load_subject_is_counted_once(
    q: echomq.Queue,
) -> None:
    jid = await q.lanes.enqueue("a", "x")
    later = (await q.lanes.submit("b", "y", load_subject="a", delay_ms=200)).job_id
    assert await q.lanes.load("a") == 2
    await asyncio.sleep(0.3)
    await q.promote()
    assert await q.lanes.load("a") == 2
    for left in (2, 1):
        c = await q.lanes.claim("w", LEASE)
        assert c is not None and c.job_id in (jid, later)
        assert await q.lanes.load("a") == left  # a claim moves it, counting it still
        assert await q.jobs.complete(c.job_id, c.token)
    assert await q.lanes.load("a") == 0


async def test_delay_and_run_at_together_is_a_value_error(q: echomq.Queue) -> None:
    with pytest.raises(ValueError, match="not both"):
        await q.jobs.enqueue("x", delay_ms=10, run_at_ms=10)
    with pytest.raises(ValueError, match="not both"):
        await q.lanes.enqueue("a", "x", delay_ms=10, run_at_ms=10)
    with pytest.raises(ValueError):
        await q.lanes.submit("a", "x", delay_ms=-1)
    with pytest.raises(TypeError):
        await q.jobs.enqueue("x", run_at_ms=1.5)  # type: ignore[arg-type]
    assert (await q.stats())["counters"].get("enqueued", 0) == 0


@pytest.mark.parametrize("source", ["jobs", "lanes"])
async def test_a_parked_consumer_wakes_by_the_due_time_without_polling(
    q: echomq.Queue, source: str
) -> None:
    started: list[float] = []
    done = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        started.append(time.monotonic())
        done.set()

    c = echomq.Consumer(q, handler, lease_ms=LEASE, source=source)  # type: ignore[arg-type]
    task = asyncio.create_task(c.run())
    try:
        await asyncio.sleep(0.5)  # parked: nothing to do (park_max_ms is 15 s)
        t0 = time.monotonic()
        if source == "jobs":
            await q.jobs.enqueue("x", delay_ms=800)
        else:
            await q.lanes.enqueue("a", "x", delay_ms=800)
        await asyncio.wait_for(done.wait(), 5)
        assert 0.75 <= started[0] - t0 < 1.6
    finally:
        c.stop()
        await task


def text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
