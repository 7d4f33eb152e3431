"""Valkey's own ceiling: a trivial ``EVALSHA`` with ``redis-benchmark`` and with a pipelined
redis-py client, the figure the lifecycle's jobs/s is set beside."""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import subprocess
import time
from typing import Any

import redis.asyncio as aioredis
from rich.table import Table

from bench.common import (
    command_calls,
    server_cpu_seconds,
)
from bench.queue.output import console, fmt, progress

TRIVIAL = "return 1"


def redis_benchmark(port: int, sha: str, *, n: int, clients: int, pipeline: int) -> float | None:
    exe = shutil.which("redis-benchmark") or shutil.which("valkey-benchmark")
    if exe is None:
        return None
    cmd = [
        exe,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-n",
        str(n),
        "-c",
        str(clients),
        "-P",
        str(pipeline),
        "--csv",
        "EVALSHA",
        sha,
        "1",
        "bench:k",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if len(r) > 1]
    return float(rows[-1][1])  # rows[0] is the header: "test","rps",...


async def redispy_ceiling(url: str, sha: str, *, total: int, conns: int, batch: int) -> float:
    clients = [aioredis.from_url(url) for _ in range(conns)]
    try:
        await asyncio.gather(*(c.ping() for c in clients))
        rounds = max(1, total // (conns * batch))

        async def one(c: aioredis.Redis) -> None:
            for _ in range(rounds):
                pipe = c.pipeline(transaction=False)
                for _ in range(batch):
                    pipe.evalsha(sha, 1, "bench:k")
                await pipe.execute()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(c) for c in clients))
        return rounds * conns * batch / (time.perf_counter() - t0)
    finally:
        for c in clients:
            await c.aclose()


async def ceiling(conn: aioredis.Redis, port: int, url: str) -> dict[str, Any]:
    sha = await conn.script_load(TRIVIAL)
    out: dict[str, Any] = {"script": TRIVIAL, "keys": 1}
    with progress() as p:
        p.add_task("ceiling: trivial EVALSHA", total=None)
        try:
            (c0, _), cpu0 = await command_calls(conn), await server_cpu_seconds(conn)
            out["redis_benchmark_p100_c8"] = redis_benchmark(
                port, sha, n=400_000, clients=8, pipeline=100
            )
            (c1, _), cpu1 = await command_calls(conn), await server_cpu_seconds(conn)
            if out["redis_benchmark_p100_c8"] and c1 > c0:
                # Valkey's CPU per trivial call, to weigh a job's scripts against.
                out["server_us_per_trivial_call"] = round(1e6 * (cpu1 - cpu0) / (c1 - c0), 3)
            out["redis_benchmark_p1_c32"] = redis_benchmark(
                port, sha, n=100_000, clients=32, pipeline=1
            )
        except (subprocess.SubprocessError, OSError, ValueError, IndexError) as e:
            console.print(f"[yellow]redis-benchmark failed: {e}")
            out["redis_benchmark_p100_c8"] = out["redis_benchmark_p1_c32"] = None
        (c0, _), cpu0 = await command_calls(conn), await server_cpu_seconds(conn)
        out["redispy_pipelined_b100_c4"] = await redispy_ceiling(
            url, sha, total=200_000, conns=4, batch=100
        )
        (c1, _), cpu1 = await command_calls(conn), await server_cpu_seconds(conn)
        out.setdefault("server_us_per_trivial_call", round(1e6 * (cpu1 - cpu0) / (c1 - c0), 3))
    # The reference for the ratios: the server's own ceiling when a client can keep it fed.
    out["reference"] = out["redis_benchmark_p100_c8"] or out["redispy_pipelined_b100_c4"]
    out["reference_source"] = (
        "redis-benchmark -P 100 -c 8" if out["redis_benchmark_p100_c8"] else "redis-py pipelined"
    )
    return out


def print_ceiling(c: dict[str, Any]) -> None:
    t = Table(title="1. Valkey ceiling: trivial EVALSHA (`return 1`, 1 key), same server")
    t.add_column("client")
    t.add_column("calls/s", justify="right")
    rb = "redis-benchmark"
    missing = "skipped: apt-get install redis-tools"
    for label, key in (
        (f"{rb} -P 100 -c 8 (pipelined)", "redis_benchmark_p100_c8"),
        (f"{rb} -P 1 -c 32 (one call per round trip)", "redis_benchmark_p1_c32"),
        (
            "redis-py asyncio + hiredis, pipelines of 100, 4 connections",
            "redispy_pipelined_b100_c4",
        ),
    ):
        v = c.get(key)
        t.add_row(label, fmt(v) if v else missing)
    console.print(t)
    console.print(
        f"  reference ceiling for ratios: {fmt(c['reference'])}/s ({c['reference_source']}); "
        f"Valkey spends {c['server_us_per_trivial_call']:.2f} µs of CPU per trivial call"
    )
