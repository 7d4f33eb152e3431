"""How late scheduled jobs fire: ``--schedules`` every_ms schedules of ``--every-ms`` run by
``--procs`` consumer processes until ``--ticks`` ticks have come due. Prints p50/p99/max
lateness (the job row's enqueue time minus its ``scheduled_for_ms``, both on the server
clock), the ticks missed (still unfired when the next one came due: folded into the late
job, ``missed="catch_up_one"``) and the script calls the server ran. It is not a test.

    uv run python -m bench.bench_schedules [--ticks 10000] [--schedules 100]
                                           [--every-ms 100] [--procs 2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress

import echomq
from bench.common import ROOT, command_counts, embedded_server, machine
from bench.compare.figures import latency_ms

QUEUE = "sched"


async def consume(url: str) -> None:
    """A consumer process: its scheduler fires the ticks; it claims from the plain queue,
    which the schedules leave empty (their jobs go to lanes)."""

    async def handler(claim: echomq.Claim) -> None:
        return None

    consumer = echomq.Consumer(echomq.Queue(echomq.connect(url), QUEUE), handler, source="jobs")
    await consumer.run(install_signal_handlers=True)


async def consumers_up(url: str, procs: int) -> None:
    q = echomq.Queue(echomq.connect(url), QUEUE)
    while len(await q.workers()) < procs:
        await asyncio.sleep(0.1)
    await q.conn.aclose()


async def measure(
    url: str, ticks: int, schedules: int, every_ms: int, progress: Progress | None
) -> dict[str, Any]:
    q = echomq.Queue(echomq.connect(url), QUEUE)
    names = [f"s{i:04d}" for i in range(schedules)]
    for name in names:
        # catch_up_one: a tick later than a period still fires (folding the ticks it
        # spans), so the lateness figures include the late ones.
        await q.schedules.add(
            name, {"s": name}, every_ms=every_ms, lane=name, missed="catch_up_one"
        )
    task = progress.add_task("ticks due", total=ticks) if progress else None
    due = 0
    while due < ticks:
        await asyncio.sleep(0.2)
        infos = await q.schedules.list()
        due = sum(i.fired + i.missed for i in infos)
        if progress is not None and task is not None:
            progress.update(task, completed=min(due, ticks))
    for name in names:
        await q.schedules.pause(name)
    await asyncio.sleep(0.2)
    late: list[int] = []
    for name in names:
        for raw in await q.conn.zrange(q.keys.lane(name), 0, -1):
            job = await q.jobs.get(raw.decode() if isinstance(raw, bytes) else raw)
            if job is not None and job.scheduled_for_ms is not None:
                late.append(job.enqueued_at_ms - job.scheduled_for_ms)
    infos = await q.schedules.list()
    counts = await command_counts(q.conn)
    await q.conn.aclose()
    return {
        "ticks_due": sum(i.fired + i.missed for i in infos),
        "fired": len(late),
        "missed": sum(i.missed for i in infos),
        # Both times are whole ms on the server clock: the figures are whole ms too.
        "lateness_ms": latency_ms([x * 1000 for x in late]) if late else {},
        # Every script call of the run (the schedulers' reads and ticks, refused ones too,
        # and the consumers' heartbeats, reaps and claims).
        "script_calls": counts.get("evalsha", 0) + counts.get("eval", 0),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with embedded_server("everysec") as server:
        procs = [
            subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is measured
                [sys.executable, "-m", "bench.bench_schedules", "--consume", server.url],
                cwd=ROOT,
            )
            for _ in range(args.procs)
        ]
        try:
            await consumers_up(server.url, args.procs)  # before the first tick
            t0 = time.monotonic()
            if args.json:
                out = await measure(server.url, args.ticks, args.schedules, args.every_ms, None)
            else:
                with Progress(transient=True) as progress:
                    out = await measure(
                        server.url, args.ticks, args.schedules, args.every_ms, progress
                    )
            out["seconds"] = round(time.monotonic() - t0, 2)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    out.update(
        schedules=args.schedules, every_ms=args.every_ms, procs=args.procs, machine=machine()
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_schedules")
    parser.add_argument("--ticks", type=int, default=10_000)
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--every-ms", type=int, default=100)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--consume", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.consume:
        asyncio.run(consume(args.consume))
        return 0
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    console = Console()
    late = out["lateness_ms"]
    console.print(
        f"{out['fired']:,} scheduled jobs fired of {out['ticks_due']:,} ticks due"
        f" ({out['missed']:,} missed, folded into late jobs) in {out['seconds']} s, {out['procs']} consumer"
        f" processes, {out['schedules']} schedules every {out['every_ms']} ms"
    )
    console.print(
        f"lateness after their time: p50 {late.get('p50', 0):.0f} ms,"
        f" p99 {late.get('p99', 0):.0f} ms, max {late.get('max', 0):.0f} ms (target p99 <= 20 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
