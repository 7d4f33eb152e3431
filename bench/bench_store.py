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
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.common import ROOT, embedded_server, machine, server_cpu_seconds
from codemojex import rules
from codemojex.store import (
    GroupCommit,
    Round,
    ScoreRecord,
    create_player,
    hash_token,
    make_engine,
    migrate_async,
    record_score,
    record_scores,
    save_round,
    sqlite_url,
)
from harness.legacy_scores import legacy_record_score

console = Console()
if not console.is_terminal:
    console = Console(width=150)

PLAYERS = 200
SECRET = ("🍎", "🍌", "🍇", "🍒")


@dataclass
class Figure:
    backend: str
    mode: str
    rows: int
    seconds: float
    cpu_s: float
    server_cpu_s: float | None = None
    mean_batch: float | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.rows if self.rows else 0.0


# --- the guesses -----------------------------------------------------------------------


class Guesses:
    """Fresh guesses of PLAYERS players, each mode in rounds of its own; every player's
    seq grows within a round, about one guess in eight solves."""

    def __init__(self) -> None:
        self.n = 0

    def make(self, round_id: str, count: int) -> list[ScoreRecord]:
        out = []
        seqs: dict[str, int] = {}
        for i in range(count):
            pid = f"PLR_{i % PLAYERS:04d}"
            seq = seqs.get(pid, 0)
            seqs[pid] = seq + 1
            solved = (i * 7919) % 8 == 0
            guess = SECRET if solved else ("🍑",) * 4
            fb = rules.feedback(SECRET, guess)
            self.n += 1
            at = 1_000_000 + self.n
            out.append(ScoreRecord(
                job_id=f"JOB_{self.n:026d}", round_id=round_id, player_id=pid, seq=seq,
                guess=guess, exact=fb.exact, near=fb.near, solved=fb.solved,
                points=rules.points_for(seq, fb.solved), accepted_at_ms=at,
                scored_at_ms=at + 3, attempts=1, worker_id="WRK_bench",
            ))  # fmt: skip
        return out


async def seed(engine: Any, rounds: int) -> None:
    for i in range(PLAYERS):
        pid = f"PLR_{i:04d}"
        await create_player(engine, f"p{i}", hash_token(pid), 1, player_id=pid)
    for r in range(rounds):
        await save_round(engine, Round(f"RND_{r:03d}", 4, rules.DEFAULT_PALETTE, SECRET, 0, 1))


# --- the modes -------------------------------------------------------------------------


def cluster_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds of a PostgreSQL postmaster and all its children (ours: nothing else)."""
    if pid is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        me = int(stat.parent.name)
        if me == pid or int(fields[1]) == pid:  # fields[1] is the ppid
            total += int(fields[11]) + int(fields[12])
    return total / tick


async def timed(
    backend: str,
    mode: str,
    rows: int,
    body: Callable[[], Awaitable[float | None]],
    server_pid: int | None,
) -> Figure:
    s0 = cluster_cpu_seconds(server_pid)
    c0, t0 = time.process_time(), time.perf_counter()
    mean_batch = await body()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = cluster_cpu_seconds(server_pid)
    server = s1 - s0 if s0 is not None and s1 is not None else None
    return Figure(backend, mode, rows, seconds, cpu, server, mean_batch)


async def run_backend(
    backend: str,
    url: str,
    rows: int,
    batches: Sequence[int],
    writers: int,
    progress: Progress,
    server_pid: int | None = None,
) -> list[Figure]:
    await migrate_async(url)
    engine = make_engine(url)
    modes = 3 + len(batches)
    guesses = Guesses()
    figures: list[Figure] = []
    try:
        await seed(engine, modes + 1)
        # Round 0 warms the pool, the compiled statements and the driver's prepared ones.
        await record_scores(engine, guesses.make("RND_000", 64))
        for r in guesses.make("RND_000", 16):
            await legacy_record_score(engine, r)
        rounds = (f"RND_{r:03d}" for r in range(1, modes + 1))
        task = progress.add_task(f"{backend}", total=rows * modes)

        round_legacy, round_one = next(rounds), next(rounds)

        async def legacy() -> None:
            for r in guesses.make(round_legacy, rows):
                await legacy_record_score(engine, r)
                progress.advance(task)

        async def one_by_one() -> None:
            for r in guesses.make(round_one, rows):
                await record_score(engine, r)
                progress.advance(task)

        figures.append(
            await timed(backend, "before: per guess (6 statements)", rows, legacy, server_pid)
        )
        figures.append(
            await timed(backend, "record_score (batch of 1)", rows, one_by_one, server_pid)
        )
        for size in batches:
            records = guesses.make(next(rounds), rows)

            async def batched(records: list[ScoreRecord] = records, size: int = size) -> None:
                for k in range(0, len(records), size):
                    await record_scores(engine, records[k : k + size])
                    progress.advance(task, len(records[k : k + size]))

            figures.append(
                await timed(backend, f"record_scores ×{size}", rows, batched, server_pid)
            )

        records = guesses.make(next(rounds), rows)
        group = GroupCommit(engine)

        async def grouped() -> float:
            it = iter(records)

            async def writer() -> None:
                for r in it:  # the writers share one iterator: each record once
                    await group.write(r)
                    progress.advance(task)

            await asyncio.gather(*(writer() for _ in range(writers)))
            await group.close()
            return group.records / max(group.batches, 1)

        figures.append(
            await timed(backend, f"GroupCommit, {writers} writers", rows, grouped, server_pid)
        )
    finally:
        await engine.dispose()
    return figures


def sqlite_commit_rate(path: Path, slices: int = 3) -> tuple[float, float]:
    """One-row transactions per second (median and best of 1 s slices), WAL, default
    synchronous: the fsync-bound limit of one writer on this disk."""
    conn = sqlite3.connect(path, isolation_level=None)
    rates = []
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER)")
        conn.execute("INSERT OR IGNORE INTO t VALUES (1, 0)")
        for _ in range(slices):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 1.0:
                conn.execute("BEGIN")
                conn.execute("UPDATE t SET v = v + 1 WHERE k = 1")
                conn.execute("COMMIT")
                n += 1
            rates.append(n / (time.perf_counter() - t0))
    finally:
        conn.close()
    return statistics.median(rates), max(rates)


# --- the whole worker: drain accepted guesses at several handler concurrencies ----------------


@dataclass
class Drain:
    backend: str
    concurrency: int
    rows: int
    seconds: float
    worker_cpu_s: float
    valkey_cpu_s: float
    sql_cpu_s: float | None  # PostgreSQL server processes, when the cluster is ours

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def proc_cpu_seconds(pids: Sequence[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


async def drain(
    backend: str,
    sql_url: str,
    valkey_url: str,
    rows: int,
    concurrencies: Sequence[int],
    procs: int,
    progress: Progress,
    sql_pid: int | None = None,
) -> list[Drain]:
    from codemojex.config import Config
    from codemojex.game import Game

    await migrate_async(sql_url)
    config = Config(valkey_url=valkey_url, database_url=sql_url, round_seconds=3600)
    if hasattr(config, "guess_rate"):  # bulk acceptance: no per-player submission throttle
        config = config.with_(guess_rate=0)
    game = Game.connect(config)
    out: list[Drain] = []
    try:
        players = [(await game.create_player(f"b{i}")).player_id for i in range(PLAYERS)]
        rnd, _ = await game.current_round()
        task = progress.add_task(f"{backend} worker drain", total=rows * len(concurrencies))
        for c in concurrencies:
            # Accept the guesses first (a few solves among misses), then let the workers go.
            for i in range(rows):
                guess = list(rnd.secret) if i % 9 == 0 else [rules.DEFAULT_PALETTE[i % 8]] * 4
                await game.submit(players[i % PLAYERS], rnd.round_id, guess)
            out.append(
                await _drain_once(backend, config, game, rows, c, procs, progress, task, sql_pid)
            )
    finally:
        await game.close()
    return out


async def _drain_once(
    backend: str,
    config: Any,
    game: Any,
    rows: int,
    concurrency: int,
    procs: int,
    progress: Progress,
    task: Any,
    sql_pid: int | None = None,
) -> Drain:
    async def completed() -> int:
        return int((await game.queue.stats())["counters"].get("completed", 0))

    base = await completed()
    env = dict(
        os.environ, CODEMOJEX_VALKEY_URL=config.valkey_url,
        CODEMOJEX_DATABASE_URL=config.database_url, CODEMOJEX_CONCURRENCY=str(concurrency),
    )  # fmt: skip
    workers = [
        subprocess.Popen([sys.executable, "-m", "codemojex", "worker"], env=env, cwd=ROOT,  # noqa: ASYNC220
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(procs)
    ]  # fmt: skip
    pids = [w.pid for w in workers]
    try:
        done = 0
        while done == 0:  # start-up (imports, connections) is not the work measured
            await asyncio.sleep(0.005)
            done = await completed() - base
        t0, cpu0, first = time.perf_counter(), proc_cpu_seconds(pids), done
        valkey0, sql0 = await server_cpu_seconds(game.conn), cluster_cpu_seconds(sql_pid)
        while done < rows:
            await asyncio.sleep(0.02)
            done = await completed() - base
            progress.update(task, completed=progress.tasks[task].completed)
        seconds, cpu = time.perf_counter() - t0, proc_cpu_seconds(pids) - cpu0
        valkey = await server_cpu_seconds(game.conn) - valkey0
        sql1 = cluster_cpu_seconds(sql_pid)
        sql = sql1 - sql0 if sql0 is not None and sql1 is not None else None
        progress.advance(task, rows)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    return Drain(backend, concurrency, rows - first, seconds, cpu, valkey, sql)


# --- write latency: two processes writing through GroupCommit, open loop ---------------------


async def latency_child(url: str, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    """One writer process: ``rate`` guesses/s offered on a fixed schedule (open loop) to a
    GroupCommit; each write's latency runs from its scheduled time to its commit."""
    engine = make_engine(url)
    group = GroupCommit(engine)
    guesses = Guesses()
    guesses.n = int(tag) * 10**9  # JOB ids of their own
    records = guesses.make("RND_001", int(rate * seconds))
    latencies: list[float] = []
    loop = asyncio.get_running_loop()

    async def one(record: ScoreRecord, due: float) -> None:
        await group.write(record)
        latencies.append(loop.time() - due)

    try:
        await record_scores(engine, guesses.make("RND_000", 8))  # connect, prepare
        cpu0, start = time.process_time(), loop.time()
        tasks = []
        for i, record in enumerate(records):
            due = start + i / rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            tasks.append(asyncio.create_task(one(record, due)))
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu0
        await group.close()
    finally:
        await engine.dispose()
    latencies.sort()
    return {
        "n": len(latencies),
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[int(len(latencies) * 0.99)],
        "max": latencies[-1],
        "cpu_s": cpu,
        "batch": group.records / max(group.batches, 1),
    }


@dataclass
class Latency:
    backend: str
    rate: float
    children: list[dict[str, Any]]


async def latency(
    backend: str,
    url: str,
    rates: Sequence[float],
    procs: int,
    seconds: float,
    progress: Progress,
) -> list[Latency]:
    import json

    await migrate_async(url)
    engine = make_engine(url)
    try:
        await seed(engine, 2)
    finally:
        await engine.dispose()
    out = []
    task = progress.add_task(f"{backend} write latency", total=len(rates))
    for k, rate in enumerate(rates):
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.bench_store", "--latency-child", url,
                str(rate / procs), str(seconds), str(k * procs + i + 1),
                cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            )
            for i in range(procs)
        ]  # fmt: skip
        results = [json.loads((await c.communicate())[0]) for c in children]
        out.append(Latency(backend, rate, results))
        progress.advance(task)
    return out


def latency_table(rows: list[Latency], procs: int, seconds: float) -> Table:
    t = Table(box=box.SIMPLE_HEAVY, title=(
        f"GroupCommit write latency: {procs} processes, open loop, {seconds:.0f} s per rate"
    ))  # fmt: skip
    for col in ("backend", "offered/s", "p50 ms", "p99 ms", "max ms", "CPU ms/guess",
                "mean batch"):  # fmt: skip
        t.add_column(col, justify="left" if col == "backend" else "right")
    for r in rows:
        n = sum(c["n"] for c in r.children)
        t.add_row(
            r.backend, f"{r.rate:,.0f}",
            f"{1000 * max(c['p50'] for c in r.children):.1f}",
            f"{1000 * max(c['p99'] for c in r.children):.1f}",
            f"{1000 * max(c['max'] for c in r.children):.1f}",
            f"{1000 * sum(c['cpu_s'] for c in r.children) / n:.3f}",
            f"{sum(c['batch'] for c in r.children) / len(r.children):.1f}",
        )  # fmt: skip
    t.caption = "Latency: scheduled time -> commit; the worse of the processes' percentiles."
    return t


# --- output ----------------------------------------------------------------------------


def table(figures: list[Figure], commit_rate: tuple[float, float]) -> Table:
    t = Table(box=box.SIMPLE_HEAVY, title="ScoreWorker SQL write: rows/s and CPU per guess")
    for col in ("backend", "mode", "rows/s", "× rows/s", "CPU ms/guess", "× CPU",
                "server CPU ms/guess", "mean batch"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("backend", "mode") else "right")
    base: dict[str, Figure] = {}
    for f in figures:
        b = base.setdefault(f.backend, f)
        t.add_row(
            f.backend, f.mode, f"{f.rate:,.0f}", f"{f.rate / b.rate:.1f}×",
            f"{f.cpu_ms:.3f}", f"{b.cpu_ms / f.cpu_ms:.1f}× less" if f is not b else "1.0×",
            "-" if f.server_cpu_s is None else f"{1000 * f.server_cpu_s / f.rows:.3f}",
            "-" if f.mean_batch is None else f"{f.mean_batch:.1f}",
        )  # fmt: skip
    t.caption = (
        "SQLite physical limit (sqlite3, one-row commits, WAL, fsync): "
        f"{commit_rate[0]:,.0f} commits/s median of 1 s slices, best {commit_rate[1]:,.0f}.\n"
        "CPU = this process, all threads (aiosqlite's included); ratios against the first "
        "row of each backend, measured in the same run."
    )
    return t


def drain_table(drains: list[Drain], procs: int) -> Table:
    t = Table(box=box.SIMPLE_HEAVY,
              title=f"{procs} codemojex worker processes draining accepted guesses")  # fmt: skip
    cols = ("backend", "concurrency", "scored/s", "worker CPU ms/guess (all workers)",
            "Valkey CPU ms/guess", "PostgreSQL CPU ms/guess")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "backend" else "right")
    for d in drains:
        t.add_row(
            d.backend, str(d.concurrency), f"{d.rate:,.0f}",
            f"{1000 * d.worker_cpu_s / d.rows:.3f}", f"{1000 * d.valkey_cpu_s / d.rows:.3f}",
            "-" if d.sql_cpu_s is None else f"{1000 * d.sql_cpu_s / d.rows:.3f}",
        )  # fmt: skip
    t.caption = "From the first completion to the last: worker start-up is left out."
    return t


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


if __name__ == "__main__":
    main()
