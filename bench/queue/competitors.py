"""The same lifecycle with SAQ and arq on the same server, when importable."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from bench.queue.lifecycle import drain, print_lifecycle
from bench.queue.output import console, fmt, progress


async def _peer_drain(
    conn: aioredis.Redis,
    url: str,
    *,
    lib: str,
    queue: str,
    waiting_key: str,
    procs: int,
    n: int,
    concurrency: int,
    fsync: str,
    enq_s: float,
) -> dict[str, Any]:
    """Drain ``n`` jobs a peer enqueued in ``enq_s`` with ``procs`` of its workers; done is
    read off the peer's own sorted set of unfinished jobs, ``waiting_key``."""

    async def done() -> int:
        return n - int(await conn.zcard(waiting_key))

    r = await drain(
        conn,
        url,
        lib=lib,
        queue=queue,
        procs=procs,
        n=n,
        done=done,
        label=f"{lib} drain x{procs}",
        extra_args=["--concurrency", str(concurrency)],
        timeout=max(60.0, n / 100),
    )
    return {
        "lib": lib,
        "appendfsync": fsync,
        "source": "queue",
        "procs": procs,
        "jobs": n,
        "concurrency": concurrency,
        "enqueue_per_s": round(n / enq_s, 1),
        **r,
    }


async def saq_lifecycle(
    conn: aioredis.Redis, url: str, *, procs: int, n: int, concurrency: int, fsync: str
) -> dict[str, Any]:
    from saq import Queue as SaqQueue

    await conn.flushall()
    name = f"saq-{procs}"
    sq = SaqQueue.from_url(url, name=name)
    await sq.connect()
    try:
        enq_s = await enqueue_each(f"saq enqueue {n}", n, lambda: sq.enqueue("noop"))
    finally:
        await sq.disconnect()
    return await _peer_drain(
        conn,
        url,
        lib="saq",
        queue=name,
        waiting_key=f"saq:{name}:incomplete",
        procs=procs,
        n=n,
        concurrency=concurrency,
        fsync=fsync,
        enq_s=enq_s,
    )


async def arq_lifecycle(
    conn: aioredis.Redis, url: str, *, procs: int, n: int, concurrency: int, fsync: str
) -> dict[str, Any]:
    from arq.connections import RedisSettings, create_pool

    await conn.flushall()
    name = f"arq-{procs}"
    pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=name)
    try:
        enq_s = await enqueue_each(f"arq enqueue {n}", n, lambda: pool.enqueue_job("noop"))
    finally:
        await pool.aclose()
    return await _peer_drain(
        conn,
        url,
        lib="arq",
        queue=name,
        waiting_key=name,
        procs=procs,
        n=n,
        concurrency=concurrency,
        fsync=fsync,
        enq_s=enq_s,
    )


async def enqueue_each(
    label: str, n: int, one: Callable[[], Awaitable[Any]], inflight: int = 32
) -> float:
    """Call ``one()`` n times, ``inflight`` at once (for libraries without bulk enqueue);
    returns seconds. A failure cancels the rest (TaskGroup), so nothing is left dangling."""
    left = n
    with progress() as p:
        task = p.add_task(label, total=n)

        async def pump() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await one()
                p.advance(task)

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for _ in range(inflight):
                tg.create_task(pump())
        return time.perf_counter() - t0


def install_competitors() -> None:
    uv = shutil.which("uv")
    base = (
        [uv, "pip", "install", "--python", sys.executable]
        if uv
        else [sys.executable, "-m", "pip", "install"]
    )
    # arq pins redis<6; installed without its deps it runs on the project's redis-py.
    for extra in (["saq"], ["--no-deps", "arq"]):
        subprocess.run([*base, *extra], check=False)


async def competitors(
    conn: aioredis.Redis, url: str, a: argparse.Namespace, ref: float, ours: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if a.no_competitors:
        console.print("4. Competitors: skipped (--no-competitors)")
        return []
    if a.install_competitors:
        install_competitors()
        importlib.invalidate_caches()
    rows: list[dict[str, Any]] = []
    n = min(a.jobs, a.competitor_jobs)
    for lib, fn in (("saq", saq_lifecycle), ("arq", arq_lifecycle)):
        if importlib.util.find_spec(lib) is None:
            hint = "uv pip install saq" if lib == "saq" else "uv pip install --no-deps arq"
            console.print(f"4. {lib}: skipped: {hint}")
            continue
        for procs in a.competitor_procs:
            try:
                rows.append(
                    await fn(
                        conn, url, procs=procs, n=n, concurrency=a.concurrency, fsync=a.appendfsync
                    )
                )
            except Exception as e:  # noqa: BLE001 - a competitor's failure must not lose ours
                console.print(f"[yellow]4. {lib} x{procs} failed: {type(e).__name__}: {e}")
                break
    if rows:
        mine = [r for r in ours if r["appendfsync"] == a.appendfsync]
        print_lifecycle(
            mine + rows, ref, f"4. Side by side on the same Valkey (appendfsync {a.appendfsync})"
        )
        best: dict[int, float] = {}
        for r in rows:
            best[r["procs"]] = max(best.get(r["procs"], 0.0), r["jobs_per_s"])
        for procs, theirs in sorted(best.items()):
            lanes = [r["jobs_per_s"] for r in mine if r["procs"] == procs]
            if lanes:
                console.print(
                    f"  x{procs} processes: echomq {fmt(min(lanes))}-{fmt(max(lanes))} jobs/s vs "
                    f"fastest competitor {fmt(theirs)} jobs/s -> "
                    f"[bold]{min(lanes) / theirs:.1f}x-{max(lanes) / theirs:.1f}x"
                )
    return rows
