"""Partitioned queues on a 3-master Valkey Cluster: how much of Valkey's work per job each
master carries, against the number of partitions. Prints figures, it is not a test.

    uv run python -m bench.bench_partitions [--jobs 20000] [--repeat 3] [--partitions 1,3,6]
        [--workers 2] [--name guesses] [--appendfsync always] [--json OUT] [--html OUT]

Starts its own cluster (``harness/cluster.py``: 3 masters with even slot ranges, AOF on,
``appendfsync always`` as in production) in a temp dir. One *run* is one partition count N:
``--jobs`` jobs over 300 lanes are enqueued by this process (100 at once), then drained by
``--workers`` worker processes, each an ``echomq.PartitionedConsumer`` (concurrency 32,
batch 32, a handler that returns at once), started and connected before they are told "go"
together; the drain ends when the partitions' summed stats count every job completed. Runs
interleave the partition counts (1,3,6,1,3,6,…) ``--repeat`` times; between runs the
masters are flushed and their AOF rewritten, so every run starts empty and the queue keeps
its real name (``--name``, the game's ``guesses`` by default): a partition's master is the
CRC16 slot of ``name:i``, which decides how evenly the partitions land on the masters.

Why CPU per job, not jobs/s: on a 2-core machine the Python workers and this client use the
cores long before one master's thread is busy, so completed/s measures the clients. What the
cluster buys is measured instead: each master's CPU (``/proc/<pid>/stat``, user + system)
during the enqueue and the drain, per job of the logical queue. The busiest master bounds
the rate: its thread is saturated at ``1000 / (its ms per job)`` jobs/s, the *Valkey-bound
ceiling* (enqueue + drain, as in a steady state where jobs go in as fast as they come out).
With ``appendfsync always`` a master's thread also waits for fsync, which is not CPU, so
the real ceiling is lower; the ratio between partition counts is the figure to read.
Ratios are against the first partition count (1) measured in the same repetition; tables
show medians over the repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from bench.common import (
    machine,
    machine_cores,
    signals_raise_keyboardinterrupt,
)
from bench.partitions.measure import measure_once
from bench.partitions.options import LANES, Master, Options
from bench.partitions.report import run_figures, summarize, table_lines, write_html
from bench.partitions.workers import worker_main
from harness.cluster import ValkeyCluster


def run(opts: Options, console: Console | None = None) -> dict[str, Any]:
    """Start a cluster, run every (repetition, partition count), return runs and rows."""
    console = console or Console()
    order = [(rep, n) for rep in range(opts.repeat) for n in opts.partitions]
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp:
        cluster = ValkeyCluster(
            Path(tmp),
            masters=3,
            appendfsync=opts.appendfsync,  # type: ignore[arg-type]
        )
        cluster.start()
        try:
            masters = []
            for first, last, port, _ in cluster.slots():
                pid = cluster.node(port).pid
                assert pid is not None
                masters.append(Master(port, pid, f"{first}-{last}"))
            with cluster.admin(masters[0].port) as c:
                at_start = machine(dict(c.info("server")))
            runs: list[dict[str, Any]] = []
            progress = (
                Progress(
                    TextColumn("{task.description:>14}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    refresh_per_second=4,
                )
                if opts.progress
                else None
            )
            with progress or contextlib.nullcontext():
                overall = progress.add_task("runs", total=len(order)) if progress else None
                phase = progress.add_task("", total=opts.jobs) if progress else None
                for i, (rep, n) in enumerate(order):
                    r = asyncio.run(measure_once(cluster, masters, opts, n, progress, phase))
                    r["rep"] = rep
                    runs.append(r)
                    if progress is not None and overall is not None:
                        progress.update(overall, completed=i + 1)
                    console.print(
                        f"run {i + 1}/{len(order)}: {n} partitions, jobs per master "
                        f"{r['jobs_per_master']}, busiest master "
                        f"{r['busiest_ms_per_job']:.3f} ms/job, ceiling "
                        f"{r['ceiling_per_s']:,.0f}/s, completed {r['drain']['per_s']:,.0f}/s",
                        highlight=False,
                    )
        finally:
            cluster.stop()
    rows = summarize(runs, baseline=opts.partitions[0])
    return {
        "machine": at_start,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "options": asdict(opts),
        "masters": [asdict(m) for m in masters],
        "runs": runs,
        "rows": rows,
        "table": table_lines(rows, machine_cores()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", default="1,3,6", help="the first is the baseline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32, help="per worker process")
    parser.add_argument("--name", default="guesses", help="the logical queue's name")
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--json", metavar="OUT", help="write every run and row as JSON to OUT")
    parser.add_argument("--html", metavar="OUT", help="write a self-contained HTML report")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, name, partitions, concurrency = args.worker
        asyncio.run(worker_main(url, name, int(partitions), int(concurrency)))
        return
    signals_raise_keyboardinterrupt()
    opts = Options(
        jobs=args.jobs,
        partitions=[int(x) for x in args.partitions.split(",")],
        repeat=args.repeat,
        workers=args.workers,
        concurrency=args.concurrency,
        name=args.name,
        appendfsync=args.appendfsync,
        progress=not args.no_progress,
    )
    console = Console()
    result = run(opts, console)
    m = result["machine"]
    print(
        f"\n{opts.jobs} jobs over {LANES} lanes per run, queue {opts.name!r}, "
        f"{opts.workers} worker processes (concurrency {opts.concurrency}), 3 masters, "
        f"appendfsync {opts.appendfsync}, Valkey {m['valkey']}; {m['cores']} cores "
        f"({m['cpu']}), load average {m['loadavg_1m']:.2f} at the start, "
        f"{result['loadavg_1m_at_end']:.2f} at the end; medians of "
        f"{opts.repeat} repetitions, ratios against {opts.partitions[0]} partition(s) in the "
        f"same repetition.\n"
    )
    print("\n".join(result["table"]))
    share = statistics.median(run_figures(r)["main_thread_share"] for r in result["runs"])
    rewrites = sum(r["aof_rewrites_during"] for r in result["runs"])
    print(
        f"\nMasters' main threads did {100 * share:.0f}% of their CPU (median); "
        f"AOF rewrites during runs: {rewrites}."
    )
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if args.html:
        write_html(Path(args.html), result)
        print(f"report written to {args.html}")
