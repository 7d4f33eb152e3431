"""Store benchmark: the ScoreWorker's SQL write, per guess vs in batches. Prints figures; it is
not a test.

    uv run python -m bench.bench_store [--rows N] [--batches 1,8,32,128] [--writers 64]
                                       [--database-url postgresql://…] [--no-postgres]

For each backend — SQLite (a temp file, WAL, default ``synchronous``: every commit is fsynced)
and PostgreSQL (``--database-url``, else a throwaway cluster from ``harness/pg.py`` when the
binaries are installed; that cluster runs with ``fsync=off``, so its commits are cheaper than
a real server's) — it writes N fresh guesses of 200 players and prints, per mode, rows/s and
CPU ms per guess, with ratios to the per-guess baseline measured in the same run:

- ``before: per guess``: the write as it was before group commit — six SQLAlchemy statements
  in one transaction per guess (``harness/legacy_scores.py``), one at a time: the
  baseline every ratio is against;
- ``record_score``: today's write of one guess (a batch of one), one at a time;
- ``record_scores ×B``: batches of B guesses, one transaction each, one batch at a time;
- ``GroupCommit, W writers``: W concurrent tasks each awaiting ``group.write`` (what a worker's
  handlers do), batches formed by the coalescer (the mean batch size is printed).

CPU is this process's ``time.process_time()``, which covers all its threads (aiosqlite's
included); PostgreSQL's server CPU is not in it and is printed apart when the cluster is ours.
With ``--drain N`` (``--concurrency 4,16,32,64``), the whole worker too: N guesses accepted
through ``Game.submit`` onto an embedded Valkey (``appendfsync always``), then drained by
``--procs`` ``codemojex worker`` processes at each handler concurrency; printed: scored/s and
the workers' CPU ms per guess (from ``/proc``, counted from the first completion to the last,
so start-up is left out) and the mean batch the coalescer formed.

Also printed: the raw SQLite commit rate — one-row transactions committed with fsync by the
``sqlite3`` module, no SQLAlchemy, no thread hop — the physical limit of one writer.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.common import ROOT, embedded_server, machine
from bench.store.backend import PLAYERS, Figure, console, run_backend, sqlite_commit_rate
from bench.store.drain import Drain, drain
from bench.store.latency import Latency, latency, latency_child
from bench.store.tables import drain_table, latency_table, table
from codemojex.store import (
    sqlite_url,
)


async def main_async(args: argparse.Namespace) -> None:
    batches = [int(b) for b in args.batches.split(",") if b]
    m = machine()
    console.print(
        f"[bold]bench_store[/]  {m['cpu']} · {m['cores']} cores · Python {m['python']} · "
        f"SQLite {sqlite3.sqlite_version} · load {m['loadavg_1m']:.2f} · {args.rows} rows/mode"
        + (f" · drain {args.drain} guesses" if args.drain else "")
    )
    figures: list[Figure] = []
    drains: list[Drain] = []
    latencies: list[Latency] = []
    with tempfile.TemporaryDirectory(prefix="cmx-bench-store-") as tmp:
        commit_rate = sqlite_commit_rate(Path(tmp) / "raw.db")
        cluster = None
        try:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                          transient=True) as progress:  # fmt: skip
                pg_url, pid = args.database_url, None
                if pg_url is None and not args.no_postgres:
                    cluster, pg_url, pid = start_cluster()
                pg_name = "postgresql" if cluster is None else "postgresql (fsync=off)"
                if not args.drain_only:
                    figures += await run_backend(
                        "sqlite", sqlite_url(tmp), args.rows, batches, args.writers, progress
                    )
                    if pg_url is not None:
                        figures += await run_backend(
                            pg_name, pg_url, args.rows, batches, args.writers, progress, pid
                        )
                if args.latency:
                    rates = [float(r) for r in args.latency.split(",") if r]
                    (Path(tmp) / "latency").mkdir()
                    latencies += await latency(
                        "sqlite", sqlite_url(Path(tmp) / "latency"), rates, args.procs,
                        args.latency_seconds, progress,
                    )  # fmt: skip
                    if pg_url is not None:
                        lat_url = pg_url if cluster is None else cluster.create_database()
                        latencies += await latency(
                            pg_name, lat_url, rates, args.procs, args.latency_seconds, progress
                        )
                if args.drain:
                    concurrencies = [int(c) for c in args.concurrency.split(",") if c]
                    (Path(tmp) / "drain").mkdir()
                    with embedded_server("always") as server:
                        drains += await drain(
                            "sqlite", sqlite_url(Path(tmp) / "drain"), server.url, args.drain,
                            concurrencies, args.procs, progress,
                        )  # fmt: skip
                        if pg_url is not None:
                            drain_url = pg_url if cluster is None else cluster.create_database()
                            drains += await drain(
                                pg_name, drain_url, server.url, args.drain, concurrencies,
                                args.procs, progress, pid,
                            )  # fmt: skip
        finally:
            if cluster is not None:
                cluster.stop()
    if figures:
        console.print(table(figures, commit_rate))
    if drains:
        console.print(drain_table(drains, args.procs))
    if latencies:
        console.print(latency_table(latencies, args.procs, args.latency_seconds))


def start_cluster() -> tuple[Any, str | None, int | None]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from harness.pg import PgCluster, PgUnavailable

    try:
        cluster = PgCluster.start()
    except PgUnavailable as e:
        console.print(f"[yellow]PostgreSQL skipped: {e}[/]")
        return None, None, None
    pid = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    return cluster, cluster.create_database(), pid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=3000, help="guesses per mode (default 3000)")
    p.add_argument("--batches", default="1,8,32,128", help="record_scores batch sizes")
    p.add_argument("--writers", type=int, default=64, help="concurrent GroupCommit writers")
    p.add_argument("--database-url", help="a PostgreSQL database to use instead of a cluster")
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    p.add_argument(
        "--drain",
        type=int,
        default=0,
        metavar="N",
        help="also drain N accepted guesses with codemojex worker processes "
        f"(at most {100 * PLAYERS:,}: the lane cap is 100 per player)",
    )
    p.add_argument(
        "--drain-only",
        action="store_true",
        help="only --drain and --latency, not the batch-size table",
    )
    p.add_argument(
        "--latency",
        default="",
        metavar="RATES",
        help="also GroupCommit write latency at these offered rates (e.g. 300,1000)",
    )
    p.add_argument("--latency-seconds", type=float, default=5.0, help="per rate (5)")
    p.add_argument("--latency-child", nargs=4, help=argparse.SUPPRESS)
    p.add_argument(
        "--concurrency",
        default="4,16,32,64",
        help="handler concurrencies for --drain (default 4,16,32,64)",
    )
    p.add_argument("--procs", type=int, default=2, help="worker processes for --drain (2)")
    args = p.parse_args()
    if args.latency_child:
        import json

        url, rate, seconds, tag = args.latency_child
        result = asyncio.run(latency_child(url, float(rate), float(seconds), tag))
        print(json.dumps(result))
        return
    asyncio.run(main_async(args))
