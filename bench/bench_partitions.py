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
import html
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from bench.common import (
    machine,
    machine_busy_seconds,
    machine_cores,
    png_data_uri,
    proc_cpu_seconds,
    signals_raise_keyboardinterrupt,
)
from echomq.connection import connect
from echomq.partitions import Partitioned, PartitionedConsumer
from harness.cluster import ValkeyCluster

ROOT = Path(__file__).resolve().parent.parent
LANES = 300
ENQUEUE_AT_ONCE = 100
POLL_S = 0.05  # the drain's stats poll: ~20 small scripts a second per partition


@dataclass
class Options:
    jobs: int = 20_000
    partitions: list[int] = field(default_factory=lambda: [1, 3, 6])
    repeat: int = 3
    workers: int = 2
    concurrency: int = 32
    name: str = "guesses"
    appendfsync: str = "always"
    progress: bool = True


@dataclass(frozen=True)
class Master:
    port: int
    pid: int
    slots: str  # "0-5460"


# ---------------------------------------------------------------------------------------------
# CPU from /proc


def main_thread_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of the process's main thread alone (``/proc/<pid>/task/<pid>/stat``):
    Valkey runs commands on it, so it is the one that saturates."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu(pids: list[int]) -> list[float]:
    out = []
    for pid in pids:
        s = proc_cpu_seconds(pid)
        if s is None:
            raise RuntimeError(f"process {pid} is gone")
        out.append(s)
    return out


@dataclass
class Snapshot:
    """CPU seconds so far of the masters (whole process and main thread), the workers, this
    process, and the whole machine, at one instant."""

    t: float
    masters: list[float]
    masters_main: list[float]
    workers: list[float]
    client: float
    machine: float

    @classmethod
    def take(cls, masters: list[Master], workers: list[int]) -> Snapshot:
        return cls(
            t=time.perf_counter(),
            masters=_cpu([m.pid for m in masters]),
            masters_main=[main_thread_cpu_seconds(m.pid) or 0.0 for m in masters],
            workers=_cpu(workers),
            client=_cpu([os.getpid()])[0],
            machine=machine_busy_seconds(),
        )


def _phase(a: Snapshot, b: Snapshot, jobs: int) -> dict[str, Any]:
    """What one phase cost, per job of the logical queue (ms) and in cores busy."""
    wall = b.t - a.t
    masters = [y - x for x, y in zip(a.masters, b.masters, strict=True)]
    main = [y - x for x, y in zip(a.masters_main, b.masters_main, strict=True)]
    workers = sum(b.workers) - sum(a.workers)
    client = b.client - a.client
    busy = b.machine - a.machine
    ours = sum(masters) + workers + client
    return {
        "seconds": wall,
        "per_s": jobs / wall if wall > 0 else 0.0,
        "master_ms_per_job": [1000 * s / jobs for s in masters],
        "master_main_thread_ms_per_job": [1000 * s / jobs for s in main],
        "master_cores": [s / wall for s in masters],
        "workers_ms_per_job": 1000 * workers / jobs,
        "workers_cores": workers / wall,
        "client_ms_per_job": 1000 * client / jobs,
        "client_cores": client / wall,
        "machine_cores": busy / wall,
        "others_cores": max(0.0, busy - ours) / wall,
    }


# ---------------------------------------------------------------------------------------------
# The worker process


async def _worker(url: str, name: str, partitions: int, concurrency: int) -> None:
    conn = connect(url, socket_timeout=30)
    pq = Partitioned(conn, name, partitions)

    async def handler(claim: object) -> None:
        return None

    consumer = PartitionedConsumer(pq, handler, concurrency=concurrency, batch=32)
    await pq.stats()  # connected: the topology is known
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # "go"
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin
    finally:
        consumer.stop()
        await task
        await conn.aclose()


@contextlib.contextmanager
def _workers(url: str, opts: Options, partitions: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The worker processes, each connected (it printed "ready"); always reaped."""
    argv = [sys.executable, "-m", "bench.bench_partitions", "--worker", url, opts.name]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(opts.workers):
            procs.append(
                subprocess.Popen(
                    [*argv, str(partitions), str(opts.concurrency)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    process_group=0,  # a terminal's Ctrl-C reaches us; we stop them
                )
            )
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"a bench worker exited early (code {p.wait()})")
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


# ---------------------------------------------------------------------------------------------
# One run


def _reset(cluster: ValkeyCluster, masters: list[Master]) -> None:
    """Empty masters with a fresh AOF, so no run pays for the last one's data or rewrite."""
    for m in masters:
        with cluster.admin(m.port) as c:
            c.flushall(asynchronous=False)
            c.bgrewriteaof()
    deadline = time.monotonic() + 60
    for m in masters:
        while True:
            p = cluster.info(m.port, "persistence")
            if not p["aof_rewrite_in_progress"] and not p["aof_rewrite_scheduled"]:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("AOF rewrite between runs took over 60 s")
            time.sleep(0.05)


def _aof_rewrites(cluster: ValkeyCluster, masters: list[Master]) -> int:
    return sum(int(cluster.info(m.port, "persistence").get("aof_rewrites", 0)) for m in masters)


def _completed(stats: Any) -> int:
    """Jobs completed since the queue began: the counter, not ``stats["completed"]``, which
    is the retained completed set and stops growing at its cap (10,000 by default)."""
    return int(stats["counters"].get("completed", 0))


async def measure_once(
    cluster: ValkeyCluster,
    masters: list[Master],
    opts: Options,
    partitions: int,
    progress: Progress | None = None,
    task: TaskID | None = None,
) -> dict[str, Any]:
    """Enqueue ``opts.jobs`` on ``partitions`` partitions, drain them; what each phase cost."""
    jobs = opts.jobs

    def show(what: str, done: int) -> None:
        if progress is not None and task is not None:
            progress.update(task, description=f"{partitions:>2} × {what}", completed=done)

    _reset(cluster, masters)
    rewrites = _aof_rewrites(cluster, masters)
    conn = connect(cluster.url, socket_timeout=30)
    try:
        pq = Partitioned(conn, opts.name, partitions)
        await pq.stats(max_lanes=0)  # connected, scripts loaded: not part of the enqueue
        where = [cluster.master_of(q.keys.prefix) for q in pq.partitions]
        show("enqueue", 0)
        a = Snapshot.take(masters, [])
        for start in range(0, jobs, ENQUEUE_AT_ONCE):
            end = min(jobs, start + ENQUEUE_AT_ONCE)
            await asyncio.gather(*(pq.enqueue(f"l{i % LANES}", i) for i in range(start, end)))
            show("enqueue", end)
        b = Snapshot.take(masters, [])
        enqueue = _phase(a, b, jobs)
        with _workers(cluster.url, opts, partitions) as procs:
            pids = [p.pid for p in procs]
            show("drain", 0)
            c = Snapshot.take(masters, pids)
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(b"go\n")
                p.stdin.flush()
            while True:
                stats = await pq.stats(max_lanes=0)
                show("drain", _completed(stats))
                if _completed(stats) >= jobs:
                    break
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a bench worker died during the drain")
                await asyncio.sleep(POLL_S)
            d = Snapshot.take(masters, pids)
        drain = _phase(c, d, jobs)
    finally:
        await conn.aclose()
    per_master = [0] * len(masters)
    for port, s in zip(where, stats["partitions"], strict=True):
        per_master[[m.port for m in masters].index(port)] += _completed(s)
    life = [
        x + y for x, y in zip(enqueue["master_ms_per_job"], drain["master_ms_per_job"], strict=True)
    ]
    busiest = max(life)
    return {
        "partitions": partitions,
        "jobs": jobs,
        "completed": _completed(stats),
        "dead": stats["dead"],
        "jobs_per_master": per_master,
        "masters_used": sum(1 for n in per_master if n),
        "enqueue": enqueue,
        "drain": drain,
        "master_ms_per_job": life,
        "busiest_ms_per_job": busiest,
        "all_masters_ms_per_job": sum(life),
        "ceiling_per_s": 1000 / busiest if busiest > 0 else float("inf"),
        "drain_ceiling_per_s": (
            1000 / max(drain["master_ms_per_job"])
            if max(drain["master_ms_per_job"]) > 0
            else float("inf")
        ),
        "aof_rewrites_during": _aof_rewrites(cluster, masters) - rewrites,
    }


# ---------------------------------------------------------------------------------------------
# Medians over the repetitions


def _figures(run: dict[str, Any]) -> dict[str, float]:
    """The figures a table row shows, from one run."""
    e, d = run["enqueue"], run["drain"]
    return {
        "masters_used": run["masters_used"],
        "enqueue_busiest_ms": max(e["master_ms_per_job"]),
        "drain_busiest_ms": max(d["master_ms_per_job"]),
        "busiest_ms": run["busiest_ms_per_job"],
        "all_masters_ms": run["all_masters_ms_per_job"],
        "ceiling_per_s": run["ceiling_per_s"],
        "drain_ceiling_per_s": run["drain_ceiling_per_s"],
        "enqueued_per_s": e["per_s"],
        "completed_per_s": d["per_s"],
        "busiest_master_cores_drain": max(d["master_cores"]),
        "workers_ms": d["workers_ms_per_job"],
        "workers_cores": d["workers_cores"],
        "client_cores_enqueue": e["client_cores"],
        "machine_cores_drain": d["machine_cores"],
        "others_cores_drain": d["others_cores"],
        "drain_s": d["seconds"],
        "main_thread_share": (
            sum(e["master_main_thread_ms_per_job"]) + sum(d["master_main_thread_ms_per_job"])
        )
        / max(1e-9, run["all_masters_ms_per_job"]),
    }


RATIOS = ("busiest_ms", "all_masters_ms", "ceiling_per_s", "completed_per_s")


def summarize(runs: list[dict[str, Any]], baseline: int) -> list[dict[str, Any]]:
    """Per partition count: the median of each figure, and the median of its ratio to the
    baseline's figure in the same repetition."""
    order = list(dict.fromkeys(r["partitions"] for r in runs))
    by_rep: dict[int, dict[int, dict[str, float]]] = {}
    for r in runs:
        by_rep.setdefault(r["rep"], {})[r["partitions"]] = _figures(r)
    rows = []
    for n in order:
        mine = [reps[n] for reps in by_rep.values() if n in reps]
        row: dict[str, Any] = {"partitions": n, "runs": len(mine)}
        for key in mine[0]:
            row[key] = statistics.median(f[key] for f in mine)
        for key in RATIOS:
            ratios = [
                reps[n][key] / reps[baseline][key]
                for reps in by_rep.values()
                if n in reps and baseline in reps and reps[baseline][key]
            ]
            row[f"{key}_x"] = statistics.median(ratios) if ratios else float("nan")
        shares = [
            sorted(100 * j / max(1, sum(r["jobs_per_master"])) for j in r["jobs_per_master"])[::-1]
            for r in runs
            if r["partitions"] == n
        ]
        # Busiest first: which master is busiest is the name's CRC16, the same every run.
        row["share_pct"] = [statistics.median(s[i] for s in shares) for i in range(len(shares[0]))]
        rows.append(row)
    return rows


def table_lines(rows: list[dict[str, Any]], cores: int) -> list[str]:
    """Two Markdown tables: Valkey's work per job, then what the clients managed."""
    base = f"{rows[0]['partitions']} partition" + ("s" if rows[0]["partitions"] > 1 else "")
    out = [
        (
            "| partitions | masters used | jobs per master %, busiest first | busiest master "
            "ms/job: enqueue + drain = total | all masters ms/job | Valkey-bound ceiling "
            f"jobs/s | × {base} |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = " / ".join(f"{s:.0f}" for s in r["share_pct"])
        out.append(
            f"| {r['partitions']} | {r['masters_used']:.0f} | {share} "
            f"| {r['enqueue_busiest_ms']:.3f} + {r['drain_busiest_ms']:.3f} = "
            f"{r['busiest_ms']:.3f} | {r['all_masters_ms']:.3f} "
            f"| {r['ceiling_per_s']:,.0f} | {r['ceiling_per_s_x']:.2f} |"
        )
    out += [
        "",
        (
            f"| partitions | enqueued/s | completed/s | × {base} | workers CPU ms/job "
            f"| workers cores | busiest master cores | machine cores busy (of {cores}) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['partitions']} | {r['enqueued_per_s']:,.0f} | {r['completed_per_s']:,.0f} "
            f"| {r['completed_per_s_x']:.2f} | {r['workers_ms']:.3f} | {r['workers_cores']:.2f} "
            f"| {r['busiest_master_cores_drain']:.2f} | {r['machine_cores_drain']:.2f} |"
        )
    return out


# ---------------------------------------------------------------------------------------------
# HTML


def write_html(path: Path, result: dict[str, Any]) -> None:
    """A self-contained page: per-master CPU per job and ceiling against measured, as plots
    (embedded PNGs), and the tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, runs = result["rows"], result["runs"]
    labels = [str(r["partitions"]) for r in rows]
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4))
    # Median ms/job of each master (busiest first within each run), stacked.
    width = len(runs[0]["master_ms_per_job"])
    bottoms = [0.0] * len(rows)
    for i in range(width):
        vals = [
            statistics.median(
                sorted(run["master_ms_per_job"], reverse=True)[i]
                for run in runs
                if run["partitions"] == r["partitions"]
            )
            for r in rows
        ]
        ax.bar(labels, vals, bottom=bottoms, label=f"{i + 1}. busiest master")
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    ax.set(
        xlabel="partitions", ylabel="Valkey CPU ms per job", title="Valkey CPU per job, by master"
    )
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(labels, [r["ceiling_per_s"] for r in rows], "o-", label="Valkey-bound ceiling")
    ax.plot(labels, [r["completed_per_s"] for r in rows], "s-", label="completed/s measured")
    ax.set(xlabel="partitions", ylabel="jobs/s", title="ceiling vs measured", ylim=(0, None))
    ax.grid(True, alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    m, o = result["machine"], result["options"]
    tables = "<pre>" + html.escape("\n".join(result["table"])) + "</pre>"
    page = f"""<!doctype html><meta charset="utf-8"><title>echomq partitions</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}
img{{max-width:100%}}pre{{font-size:.85em}}</style>
<h1>Partitioned queues on a 3-master Valkey Cluster</h1>
<p>{o["jobs"]} jobs over {LANES} lanes per run, queue {html.escape(o["name"])},
{o["workers"]} worker processes, appendfsync {html.escape(o["appendfsync"])},
{o["repeat"]} repetitions (medians). Machine: {html.escape(str(m["cpu"]))}, {m["cores"]}
cores, load average {m["loadavg_1m"]:.2f} at start.</p>
{tables}
{"".join(f'<p><img src="{src}"></p>' for src in figs)}
<p>Valkey CPU from /proc/&lt;pid&gt;/stat of each master, per job of the logical queue; the
ceiling is 1000 / the busiest master's ms per job (enqueue + drain).</p>
"""
    path.write_text(page)


# ---------------------------------------------------------------------------------------------
# The whole benchmark


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
        asyncio.run(_worker(url, name, int(partitions), int(concurrency)))
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
    share = statistics.median(_figures(r)["main_thread_share"] for r in result["runs"])
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


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
