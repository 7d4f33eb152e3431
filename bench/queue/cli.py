"""EchoMQ benchmark: prints figures, it is not a test.

    uv run python -m bench.bench_echomq [--jobs N] [--appendfsync always|everysec|no] [--json OUT]
    uv run python -m bench.bench_echomq --memory-only    # section 3's memory alone

Starts its own ``valkey-server`` (``echomq.server.EmbeddedValkey``, AOF on) in a temp dir and
measures, in one run:

1. Valkey's own ceiling: a trivial ``EVALSHA`` (``return 1``, one key) with ``redis-benchmark``
   (Debian's ``redis-tools``; skipped when absent) and with a pipelined redis-py asyncio client.
2. Lifecycle throughput (enqueue -> claim -> complete), jobs/s: N jobs enqueued pipelined
   (rate measured apart), then drained by echomq ``Consumer``s in 1, 2 and 4 separate
   processes, from ``source="lanes"`` (100 lanes) and ``source="jobs"``; the clock runs from
   "go" to the moment ``q.stats()`` counts all N completed. Printed beside the EVALSHA ceiling
   as a ratio. Repeated under ``appendfsync always`` unless that is the main mode already.
3. Valkey memory per pending job, 100,000 pending jobs with the game's guess payload: the
   game's shape (a lane per player, at most 100 pending each), 100 deep lanes, and plain;
   then enqueue -> completed event latency at a steady 500 jobs/s, one consumer process.
4. The same lifecycle with SAQ and arq on the same server, when importable
   (``uv pip install saq`` / ``uv pip install --no-deps arq``; arq pins redis<6 but runs on
   the project's redis-py; or pass ``--install-competitors``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import orjson
import redis.asyncio as aioredis
from rich.table import Table

from bench.common import (
    embedded_server,
    machine,
    machine_cores,
    signals_raise_keyboardinterrupt,
)
from bench.queue.ceiling import ceiling, print_ceiling
from bench.queue.competitors import competitors
from bench.queue.lifecycle import echomq_lifecycle, print_lifecycle
from bench.queue.memory import latency, memory, print_latency, print_memory
from bench.queue.output import console, fmt


async def run(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    report: dict[str, Any] = {"args": vars(a).copy()}
    with embedded_server(a.appendfsync) as server:
        assert server.port is not None
        conn = aioredis.from_url(server.url)
        try:
            info = await conn.info("server")
            report["machine"] = machine(info)
            print_machine(report["machine"], server)
            if a.memory_only:
                report["memory"] = await memory(conn, a.memory_jobs, a.lanes)
                print_memory(report["memory"])
                return report

            c = await ceiling(conn, server.port, server.url)
            report["ceiling"] = c
            print_ceiling(c)
            ref = float(c["reference"])

            modes = [a.appendfsync]
            if a.also_always and a.appendfsync != "always":
                modes.append("always")
            rows: list[dict[str, Any]] = []
            for fsync in modes:
                await conn.config_set("appendfsync", fsync)
                sources = ("lanes", "jobs") if fsync == a.appendfsync else ("lanes",)
                for source in sources:
                    for procs in a.procs:
                        rows.append(
                            await echomq_lifecycle(
                                conn,
                                server.url,
                                fsync=fsync,
                                source=source,
                                procs=procs,
                                n=a.jobs,
                                concurrency=a.concurrency,
                                batch=a.batch,
                                prefetch=a.prefetch,
                                lanes=a.lanes,
                                ceiling_ref=ref,
                            )
                        )
            await conn.config_set("appendfsync", a.appendfsync)
            report["lifecycle"] = rows
            print_lifecycle(rows, ref, "2. Lifecycle enqueue -> claim -> complete (no-op handler)")
            explain_ratio(rows, c, a.batch)
            print_commands(rows)

            report["memory"] = await memory(conn, a.memory_jobs, a.lanes)
            print_memory(report["memory"])

            if a.latency_seconds > 0:
                report["latency"] = [
                    await latency(
                        conn,
                        server.url,
                        source=source,
                        rate=a.latency_rate,
                        seconds=a.latency_seconds,
                        lanes=a.lanes,
                    )
                    for source in ("lanes", "jobs")
                ]
                print_latency(report["latency"])

            report["competitors"] = await competitors(conn, server.url, a, ref, rows)
        finally:
            await conn.aclose()
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    console.print(f"[dim]total wall time {report['wall_s']} s")
    return report


def print_commands(rows: list[dict[str, Any]]) -> None:
    """Commands run inside the scripts per job, by command, for enqueue and for drain
    (claim + complete, with the consumers' heartbeats and reaps), one column per run."""
    runs = [r for r in rows if r["procs"] == min(x["procs"] for x in rows)]
    cols: list[tuple[str, dict[str, float], float]] = []
    for r in runs:
        name = f"{r['source']} {r['appendfsync']}"
        cols.append(
            (f"enqueue {name}", r["enqueue_inside_per_job"], r["enqueue_inside_total_per_job"])
        )
        cols.append((f"drain {name}", r["inside_per_job"], r["inside_total_per_job"]))
    names = sorted(
        {k for _, d, _ in cols for k in d}, key=lambda k: -max(d.get(k, 0) for _, d, _ in cols)
    )
    t = Table(
        title=f"2b. Commands per job inside the scripts (INFO commandstats, x{runs[0]['procs']} procs)"
    )
    t.add_column("command")
    for label, _, _ in cols:
        t.add_column(label, justify="right")
    t.add_row("[bold]all", *(f"[bold]{total:.2f}" for _, _, total in cols))
    for k in names:
        t.add_row(k, *(f"{d[k]:.2f}" if d.get(k) else "" for _, d, _ in cols))
    console.print(t)
    console.print(
        "  [dim]per job: every command the server ran during the enqueue or the drain, the "
        "EVALSHA calls themselves and INFO left out, the parent's progress polls subtracted."
    )


def explain_ratio(rows: list[dict[str, Any]], c: dict[str, Any], batch: int) -> None:
    ref, trivial_us = float(c["reference"]), float(c["server_us_per_trivial_call"])
    spj = [r["script_calls_per_job"] for r in rows]
    spj_text = f"{min(spj):.2f}" if min(spj) == max(spj) else f"{min(spj):.2f}-{max(spj):.2f}"
    cmds = [r["server_cmds_per_job"] for r in rows]
    us = [r["server_us_per_job"] for r in rows]
    best = max(rows, key=lambda r: r["jobs_per_s"])
    console.print(
        f"  ratio = jobs/s ÷ the trivial-EVALSHA ceiling ({fmt(ref)}/s). Draining costs "
        f"{spj_text} client-sent script calls per job (claims and completions each batched, "
        f"up to {batch} jobs a call, + heartbeats/extends/reaps) and enqueueing 1 more, so "
        "with scripts as cheap as `return 1` the whole lifecycle could reach ~1.0.\n"
        f"  They are not that cheap: a job runs {min(cmds):.0f}-{max(cmds):.0f} commands inside "
        f"its scripts and costs {min(us):.0f}-{max(us):.0f} µs of Valkey CPU, i.e. "
        f"{min(us) / trivial_us:.0f}-{max(us) / trivial_us:.0f} trivial calls' worth, so "
        f"Valkey's one thread alone would saturate near {fmt(1e6 / max(us))}-{fmt(1e6 / min(us))}"
        f" jobs/s ({1e6 / max(us) / ref:.3f}-{1e6 / min(us) / ref:.3f} of the ceiling). "
        f"Best here: {fmt(best['jobs_per_s'])} jobs/s ({best['source']} x{best['procs']}, "
        f"{best['appendfsync']}); the rest of the gap is consumer CPU "
        f"({best['worker_us_per_job']:.0f} µs/job in Python) sharing "
        f'{machine_cores()} cores with Valkey and anything else running ("other CPU").'
    )


def print_machine(m: dict[str, Any], server: Any) -> None:
    t = Table(title="EchoMQ benchmark", show_header=False)
    t.add_column("k")
    t.add_column("v")
    t.add_row("CPU", f"{m['cpu']} ({m['cores']} cores)")
    t.add_row("RAM", f"{m['ram_gib']} GiB")
    t.add_row("kernel", m["kernel"])
    t.add_row(
        "Python",
        f"{m['python']} (redis-py {m['redis_py']}, hiredis {m['hiredis']}, orjson {m['orjson']})",
    )
    t.add_row(
        "load average",
        f"{m['loadavg_1m']:.2f} at start (other programs' CPU use skews "
        'every figure; see the "other CPU" column)',
    )
    t.add_row("Valkey", f"{m['valkey']} ({server.url}, appendfsync {server.appendfsync}, AOF on)")
    console.print(t)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_echomq",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per lifecycle run (20000)")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    p.add_argument(
        "--procs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2, 4],
        help="consumer process counts (1,2,4)",
    )
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--prefetch",
        type=int,
        default=0,
        help="jobs each consumer leases ahead of its free slots (0, the default)",
    )
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--memory-jobs", type=int, default=100_000)
    p.add_argument(
        "--memory-only", action="store_true", help="measure section 3's memory alone, then stop"
    )
    p.add_argument(
        "--no-also-always",
        dest="also_always",
        action="store_false",
        help="skip the appendfsync always repeat",
    )
    p.add_argument("--latency-rate", type=float, default=500.0, help="jobs/s (500)")
    p.add_argument(
        "--latency-seconds", type=float, default=10.0, help="seconds at that rate (10; 0: skip)"
    )
    p.add_argument("--competitor-jobs", type=int, default=5_000)
    p.add_argument(
        "--competitor-procs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4]
    )
    p.add_argument("--no-competitors", action="store_true")
    p.add_argument(
        "--install-competitors",
        action="store_true",
        help="uv pip install saq and arq (--no-deps) into this venv first",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    try:
        report = asyncio.run(run(a))
    except KeyboardInterrupt:
        console.print("[red]interrupted: workers and server stopped")
        return 130
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        console.print(f"figures written to {a.json}")
    return 0
