"""Valkey's memory per pending job in the game's shapes, and enqueue -> completed event
latency at a steady rate."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from rich.table import Table

from bench.common import (
    WorkerProcs,
    used_memory,
)
from bench.queue.lifecycle import PAYLOAD, enqueue_call
from bench.queue.output import console, fmt, progress
from echomq import Queue
from echomq.codec import text
from echomq.ids import job_id as mint_job_id
from echomq.lanes import lane_enqueue_call
from echomq.scripts import Call


async def flush_sync(conn: Any) -> None:
    """FLUSHALL SYNC: a lazy (background) flush would still be freeing the last run's keys
    while the next measurement starts."""
    await conn.execute_command("FLUSHALL", "SYNC")


def game_enqueue_call(q: Queue, i: int, lanes: int, payload: bytes) -> Call:
    """A guess as codemojex.guesses submits it: the player's own lane (a PLR_ id), numbered
    within the round (so the row has a ``seq``), the lane its own load subject."""
    return lane_enqueue_call(
        q.keys,
        mint_job_id(),
        f"PLR_{i % lanes:026d}",
        payload,
        seq_scope=str(PAYLOAD["round_id"]),
        seq_ttl_ms=q.settings.seq_ttl_ms,
    )


async def memory(conn: aioredis.Redis, n: int, lanes: int) -> list[dict[str, Any]]:
    """Valkey memory per pending job: the game's shape (a lane per player, at most 100
    pending each: the default lane cap), ``lanes`` deep lanes, and the plain queue."""
    payload = orjson.dumps(PAYLOAD)
    out = []
    for source, n_lanes in (("game", max(1, n // 100)), ("lanes", lanes), ("jobs", 0)):
        await flush_sync(conn)
        await asyncio.sleep(0.2)
        q = Queue(conn, f"mem-{source}")
        before = await used_memory(conn)
        with progress() as p:
            task = p.add_task(f"memory: {n} pending {source}", total=n)
            for lo in range(0, n, 1000):
                hi = min(n, lo + 1000)
                if source == "game":
                    calls = [game_enqueue_call(q, i, n_lanes, payload) for i in range(lo, hi)]
                else:
                    calls = [enqueue_call(q, source, i, n_lanes, payload) for i in range(lo, hi)]
                replies = await q.runner.run_many(calls)
                assert all(int(r[0]) == 1 for r in replies), "an enqueue was refused"
                p.advance(task, hi - lo)
        await asyncio.sleep(0.2)
        after = await used_memory(conn)
        first_lane = f"PLR_{0:026d}" if source == "game" else "L000"
        sample = await conn.zrange(
            q.keys.pending if source == "jobs" else q.keys.lane(first_lane), 0, 0
        )
        jk = q.keys.job(text(cast(bytes, sample[0])))
        row_bytes = await conn.memory_usage(jk, samples=0)
        encoding = text(await conn.object("encoding", jk))
        out.append(
            {
                "source": source,
                "lanes": n_lanes,
                "jobs": n,
                "payload_bytes": len(payload),
                "used_memory_delta": after - before,
                "bytes_per_job": round((after - before) / n, 1),
                "job_row_bytes": row_bytes,
                "job_row_encoding": encoding,
            }
        )
    await conn.flushall()
    return out


def print_memory(rows: list[dict[str, Any]]) -> None:
    t = Table(title="3. Valkey memory per pending job (INFO used_memory delta / N)")
    cols = ("queue", "pending", "payload B", "Δ used_memory", "bytes/job", "job row B", "row as")
    for col in cols:
        t.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        name = {
            "game": f"game: a lane per player ({r['lanes']}), seq",
            "lanes": f"lanes ({r['lanes']})",
        }.get(r["source"], "plain")
        t.add_row(
            name,
            fmt(r["jobs"]),
            str(r["payload_bytes"]),
            fmt(r["used_memory_delta"]),
            f"[bold]{r['bytes_per_job']:.0f}",
            fmt(r["job_row_bytes"]),
            r["job_row_encoding"],
        )
    console.print(t)
    console.print(
        "  [dim]job row B = MEMORY USAGE of one job's hash; the rest is its entry in "
        "the lane/pending sorted set and the key-space overhead."
    )


async def latency(
    conn: aioredis.Redis, url: str, *, source: str, rate: float, seconds: float, lanes: int
) -> dict[str, Any]:
    """One consumer process; jobs enqueued one at a time at ``rate``/s for ``seconds``; each
    job's time from its enqueue call to its ``completed`` event read back by this process
    (XREAD BLOCK on a connection of its own), on one clock."""
    await flush_sync(conn)
    q = Queue(conn, f"lat-{source}")
    payload = orjson.dumps(PAYLOAD)
    n = max(1, int(rate * seconds))
    sent: dict[str, float] = {}
    took: list[float] = []
    reader = aioredis.from_url(url)
    args = ["--lib", "echomq", "--url", url, "--queue", q.name, "--source", source]
    try:
        with WorkerProcs(1, args) as workers:
            workers.go()

            async def read() -> None:
                last = "$"
                while len(took) < n:
                    got: Any = await reader.xread({q.keys.events: last}, block=1000, count=1000)
                    now = time.perf_counter()
                    for _, entries in got:
                        for event_id, fields in entries:
                            last = text(event_id)
                            if fields.get(b"type") == b"completed":
                                took.append(now - sent[text(fields[b"job_id"])])

            async def send() -> None:
                t0 = time.perf_counter()
                for i in range(n):
                    wait = t0 + i / rate - time.perf_counter()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    call = enqueue_call(q, source, i, lanes, payload)
                    sent[text(cast(Any, call[2][0]))] = time.perf_counter()
                    await q.runner.run(*call)

            reading = asyncio.create_task(read())
            # the consumer registered and parked, the reader blocked on the stream's end
            await asyncio.sleep(1.0)
            await send()
            await asyncio.wait_for(reading, timeout=max(10.0, seconds))
            workers.stop()
    finally:
        await reader.aclose()
    took.sort()

    def pct(p: float) -> float:
        return round(1000 * took[min(len(took) - 1, int(p * len(took)))], 2)

    return {
        "source": source,
        "rate": rate,
        "jobs": n,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * took[-1], 2),
    }


def print_latency(rows: list[dict[str, Any]]) -> None:
    t = Table(title="3b. Enqueue -> completed event at a steady rate, one consumer process")
    for col in ("source", "rate/s", "jobs", "p50 ms", "p99 ms", "max ms"):
        t.add_column(col, justify="left" if col == "source" else "right")
    for r in rows:
        t.add_row(
            r["source"],
            fmt(r["rate"]),
            fmt(r["jobs"]),
            f"{r['p50_ms']:.2f}",
            f"[bold]{r['p99_ms']:.2f}",
            f"{r['max_ms']:.2f}",
        )
    console.print(t)
