"""A full Valkey (issue 11): an out-of-memory spell during load.

A private server with a small ``maxmemory`` and ``noeviction`` is filled until it refuses
writes (``OOM command not allowed``), held full for 2 s (shorter than the heartbeat lapse)
while a consumer works through a load with some long jobs, then freed. Heartbeats, lease
renewals and reaper turns are refused while it is full; claims and completions, which
free memory first, mostly are not. Every loop must ride it out: no job held past its
lease, none lost, none delivered or completed twice, and the worker still registered.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
import redis.asyncio

import echomq
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.harness import Figures

pytestmark = pytest.mark.chaos

CHUNK = 256 * 1024


def _fill(client: redis.Redis, start: int = 0) -> tuple[int, int]:
    """SET values until the server refuses, big ones then small ones (the refused
    command's own buffer counts while it is judged, so only a small last write leaves the
    server over maxmemory once refused). Returns the next free filler number and the
    refusals it met."""
    n = start
    for size in (CHUNK, 512):
        try:
            while True:
                client.set(f"fill:{n}", b"x" * size)
                n += 1
        except redis.exceptions.OutOfMemoryError:
            pass
    return n, 2


def _hold_full(url: str, seconds: float) -> int:
    """Fill, then keep topping up for ``seconds``: memory the server frees meanwhile (AOF
    and client buffers flushed, jobs popped) is taken again at once. Returns the fillers
    and the refusals the filling met (the others are the consumer's)."""
    client = redis.Redis.from_url(url)
    try:
        n, own = _fill(client)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            n, more = _fill(client, n)
            own += more
            time.sleep(0.002)
        return n, own
    finally:
        client.close()


@pytest.mark.timeout(harness.size(120, 300))
async def test_an_oom_spell_during_load_loses_nothing_and_kills_no_loop(
    tmp_path: Path,
    figures: Figures,
) -> None:
    jobs, long_jobs, spell_s = harness.size(600, 3_000), 6, 2.0
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="everysec", maxmemory=48 * 1024**2)
    server.start()
    conn = redis.asyncio.Redis.from_url(server.url)
    admin = redis.Redis.from_url(server.url)
    q = echomq.Queue(conn, "oom")
    runs = Counter[str]()
    slow: set[str] = set()

    async def handler(claim: echomq.Claim) -> dict[str, int]:
        runs[claim.job_id] += 1
        await asyncio.sleep(2.5 if claim.job_id in slow else 0.01)
        return {"n": claim.payload}

    ids = []
    for i in range(jobs):
        ids.append(await q.lanes.enqueue(f"l{i % 20}", i))
        if i % (jobs // long_jobs) == 0:
            slow.add(ids[-1])
    c = echomq.Consumer(q, handler, concurrency=8)  # default lease, lapse, heartbeat
    task = asyncio.create_task(c.run())
    refused = 0
    try:
        await harness.wait_until(lambda: _completed(q, 30), 30, "load started")
        t0 = time.monotonic()
        chunks, own = await asyncio.to_thread(_hold_full, server.url, spell_s)
        admin.delete(*(f"fill:{i}" for i in range(chunks)))
        spell = time.monotonic() - t0
        stats = admin.info("errorstats")
        refused = int(stats.get("errorstat_OOM", {}).get("count", 0)) - own
        await harness.wait_until(lambda: _completed(q, jobs), 90, "all jobs completed")
        # One lapse more: a heartbeat loop that died would show now.
        await asyncio.sleep(c.options.lapse_ms / 1000 + 1)
        registered = await conn.zscore(q.keys.workers, c.worker_id) is not None
        alive = not task.done()
    finally:
        c.stop()
        await asyncio.wait_for(task, 30)
        s = await q.stats()
        admin.close()
        await conn.aclose()
        server.stop()
    figures.record(
        "oom_spell",
        jobs=jobs,
        spell_s=round(spell, 2),
        fill_keys=chunks,
        consumer_oom_refusals=refused,
        completed=s["counters"].get("completed", 0),
        reaped=s["counters"].get("reaped", 0),
        delivered_twice=sum(1 for n in runs.values() if n > 1),
        registered_after=registered,
    )
    assert refused > 0, "the spell refused the consumer nothing: the test proved nothing"
    assert alive and registered
    assert s["counters"]["completed"] == jobs and s["completed"] == jobs  # none lost
    assert s["active"] == 0 and s["pending"] == 0 and s["dead"] == 0
    assert s["counters"].get("reaped", 0) == 0  # no lease ran out, no worker lapsed
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}  # none twice


async def _completed(q: echomq.Queue, n: int) -> bool:
    return (await q.stats())["counters"].get("completed", 0) >= n
