"""What priority, delays and pause cost, as ratios against the plain path measured in the
same run. Prints a table (or ``--json``); it is not a test.

    uv run python -m bench.bench_time [--jobs 5000] [--rounds 3] [--idle-s 10] [--json]

- **claim cost**: ``--jobs`` jobs enqueued on a fresh queue, then claimed one call each
  (``Jobs.claim``), the claims alone measured: Valkey's script time (``INFO
  commandstats``, EVALSHA µs), its CPU and the wall time, per job. ``plain`` enqueues
  with priority 0; ``priority`` with priorities spread over −1000…1000; ``delayed`` with
  a ``run_at_ms`` a moment ahead, claimed once due (each claim promotes due jobs before
  it pops, as a consumer's does). Modes are interleaved round by round and each figure
  is the median over the rounds; the ratios divide by ``plain`` of the same run
  (target ≤ 1.2×).
- **idle cost**: one idle :class:`~echomq.Consumer` (production defaults), the client
  commands the server ran per second over ``--idle-s`` (EVALSHA, BLPOP, …; commands run
  inside scripts are not counted), unpaused and then paused with jobs waiting (target:
  nothing more).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import echomq
from bench.common import embedded_server, machine, server_cpu_seconds

MODES = ("plain", "priority", "delayed")
LEASE_MS = 600_000
DUE_AHEAD_MS = 300
# What a client sends (the rest runs inside scripts): what an idle consumer costs.
CLIENT_COMMANDS = {"evalsha", "eval", "blpop", "ping", "hello", "client|setinfo", "script|load"}


async def _commandstats(conn: Any) -> dict[str, dict[str, float]]:
    raw = await conn.info("commandstats")
    return {k.removeprefix("cmdstat_"): v for k, v in raw.items() if isinstance(v, dict)}


async def claim_cost(url: str, mode: str, jobs: int, name: str) -> dict[str, float]:
    """Per job claimed, over ``jobs`` single claims on a fresh queue: script µs, Valkey CPU
    µs, wall µs."""
    conn = echomq.connect(url)
    q = echomq.Queue(conn, name)
    rng = random.Random(7)
    try:
        if mode == "delayed":
            run_at = await q.server_time_ms() + DUE_AHEAD_MS
            for lo in range(0, jobs, 1000):
                await q.jobs.enqueue_many([lo] * min(1000, jobs - lo), run_at_ms=run_at)
            await asyncio.sleep(DUE_AHEAD_MS / 1000 + 0.05)
        else:
            pipe_calls = []
            for i in range(jobs):
                pri = rng.randint(-1000, 1000) if mode == "priority" else 0
                pipe_calls.append(q.jobs.enqueue(i, priority=pri))
                if len(pipe_calls) == 500:
                    await asyncio.gather(*pipe_calls)
                    pipe_calls = []
            await asyncio.gather(*pipe_calls)
        await conn.config_resetstat()
        cpu0 = await server_cpu_seconds(conn)
        t0 = time.perf_counter()
        got = 0
        while await q.jobs.claim("w", LEASE_MS) is not None:
            got += 1
        wall = time.perf_counter() - t0
        cpu = await server_cpu_seconds(conn) - cpu0
        stats = await _commandstats(conn)
        if got != jobs:
            raise RuntimeError(f"{mode}: claimed {got} of {jobs}")
        script_us = sum(float(stats.get(c, {}).get("usec", 0)) for c in ("evalsha", "eval"))
        return {
            "script_us": script_us / jobs,
            "valkey_cpu_us": cpu * 1e6 / jobs,
            "wall_us": wall * 1e6 / jobs,
        }
    finally:
        await conn.aclose()


async def idle_cost(url: str, idle_s: float, paused: bool, name: str) -> float:
    """Client commands per second the server ran for one idle consumer of queue ``name``."""
    conn = echomq.connect(url)
    q = echomq.Queue(conn, name)

    async def handler(claim: echomq.Claim) -> None:
        return None

    if paused:
        await q.pause()
        # Work waiting, and a job falling due at once: a consumer must still not poll.
        await q.jobs.enqueue_many(list(range(10)))
        await q.jobs.enqueue("due", delay_ms=1)
    consumer = echomq.Consumer(q, handler, source="jobs")
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.sleep(2.0)  # started, registered, parked
        await conn.config_resetstat()
        await asyncio.sleep(idle_s)
        stats = await _commandstats(conn)
    finally:
        consumer.stop()
        await task
        await conn.aclose()
    calls = sum(int(stats.get(c, {}).get("calls", 0)) for c in CLIENT_COMMANDS)
    return calls / idle_s


async def measure(
    url: str, jobs: int, rounds: int, idle_s: float, progress: Progress | None = None
) -> dict[str, Any]:
    task = progress.add_task("bench_time", total=rounds * len(MODES) + 2) if progress else None
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES:
            runs[mode].append(await claim_cost(url, mode, jobs, f"time-{mode}-{r}"))
            if progress is not None and task is not None:
                progress.advance(task)
    claims = {
        mode: {k: statistics.median(run[k] for run in runs[mode]) for k in runs[mode][0]}
        for mode in MODES
    }
    idle: dict[str, float] = {}
    for label, paused in (("unpaused", False), ("paused", True)):
        idle[label] = await idle_cost(url, idle_s, paused, f"time-idle-{label}")
        if progress is not None and task is not None:
            progress.advance(task)
    plain = claims["plain"]
    ratios = {
        mode: {k: claims[mode][k] / plain[k] if plain[k] else 0.0 for k in plain}
        for mode in MODES
        if mode != "plain"
    }
    idle_ratio = idle["paused"] / idle["unpaused"] if idle["unpaused"] else 0.0
    return {
        "jobs": jobs,
        "rounds": rounds,
        "idle_s": idle_s,
        "claims": claims,
        "ratios": ratios,
        "idle_cmds_per_s": idle,
        "idle_ratio": idle_ratio,
    }


def table(out: dict[str, Any]) -> Table:
    t = Table(title=f"claim cost vs plain ({out['jobs']:,} jobs, median of {out['rounds']})")
    t.add_column("figure")
    for mode in MODES:
        t.add_column(mode, justify="right")
    for mode in MODES[1:]:
        t.add_column(f"{mode} × plain", justify="right")
    for key, label in (
        ("script_us", "script µs / job"),
        ("valkey_cpu_us", "Valkey CPU µs / job"),
        ("wall_us", "wall µs / job"),
    ):
        cells = [f"{out['claims'][m][key]:.1f}" for m in MODES]
        cells += [f"{out['ratios'][m][key]:.2f}×" for m in MODES[1:]]
        t.add_row(label, *cells)
    idle = out["idle_cmds_per_s"]
    t.add_row(
        "idle consumer cmds/s",
        f"{idle['unpaused']:.2f}",
        "",
        "",
        f"paused: {idle['paused']:.2f}",
        f"{out['idle_ratio']:.2f}×",
    )
    return t


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with embedded_server("no") as server:
        if args.json:
            out = await measure(server.url, args.jobs, args.rounds, args.idle_s)
        else:
            with Progress(transient=True) as progress:
                out = await measure(server.url, args.jobs, args.rounds, args.idle_s, progress)
    out["machine"] = machine()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_time")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        Console().print(table(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
