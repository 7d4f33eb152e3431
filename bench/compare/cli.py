"""``python -m bench.compare``: the options, the interleaved rounds, the output files."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any, get_args

import orjson
import redis
import redis.asyncio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import bench.compare
from bench.common import ROOT, embedded_server, machine, signals_raise_keyboardinterrupt
from bench.compare import venvs
from bench.compare.driver import DriverError
from bench.compare.figures import fastest_peer, medians, ratios
from bench.compare.measure import Setup, multi_round, one_round
from bench.compare.pins import ALL, BY_KEY, Peer
from bench.compare.report import print_tables, render_html
from bench.queue.ceiling import TRIVIAL, redis_benchmark, redispy_ceiling
from echomq.server import Allocator

console = Console()
if not console.is_terminal:  # piped or captured: wide enough for the table, no live bars
    console = Console(width=160)

NOT_FIGURES = ("version", "loadavg_1m", "per_worker", "procs", "extra_runs", "round")


def _keys(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(BY_KEY)}"
        )
    return keys


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip() and int(x) > 0]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description=bench.compare.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000, help="N, jobs per peer and round")
    p.add_argument("--peers", type=_keys, default=[p.key for p in ALL], help="comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--e2e-jobs", type=int, default=2_500, help="jobs of the latency run")
    p.add_argument("--rate", type=float, default=500.0, help="the latency run's jobs/s")
    p.add_argument("--concurrency", type=int, default=32, help="each worker's jobs in flight")
    p.add_argument(
        "--procs",
        type=_ints,
        default=[2, 4],
        help="worker processes of the EchoMQ lanes multi-process drain (2,4; 0: none)",
    )
    p.add_argument(
        "--ceiling-calls", type=int, default=400_000, help="trivial EVALSHAs of the ceiling"
    )
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument(
        "--allocator",
        choices=get_args(Allocator),
        default="auto",
        help="the server's malloc: jemalloc where installed (auto), or the binary's own",
    )
    p.add_argument("--venvs", type=Path, default=venvs.CACHE, help="the peers' venv cache")
    p.add_argument("--logs", type=Path, default=ROOT / "bench" / "out" / "compare-logs")
    p.add_argument("--json", metavar="OUT", type=Path)
    p.add_argument("--html", metavar="OUT", type=Path)
    a = p.parse_args(argv)
    if a.jobs < 20 or a.e2e_jobs < 1 or a.rounds < 1:
        p.error("--jobs must be >= 20, --e2e-jobs and --rounds >= 1")
    return a


def _ceiling(url: str, port: int, calls: int) -> dict[str, Any]:
    """Valkey's EVALSHA ceiling, as ``bench.bench_echomq`` measures it: a trivial script,
    pipelined by ``redis-benchmark -P 100 -c 8`` where it is installed (Debian's
    redis-tools), and by redis-py (pipelines of 100 on 4 connections) in any case."""

    async def run() -> dict[str, Any]:
        conn = redis.asyncio.Redis.from_url(url)
        try:
            sha = await conn.script_load(TRIVIAL)
            try:
                rb = redis_benchmark(port, sha, n=calls, clients=8, pipeline=100)
            except (subprocess.SubprocessError, OSError, ValueError, IndexError) as e:
                console.print(f"[yellow]redis-benchmark failed: {e}")
                rb = None
            py = await redispy_ceiling(url, sha, total=calls // 2, conns=4, batch=100)
        finally:
            await conn.aclose()
        return {
            "script": TRIVIAL,
            "calls": calls,
            "redis_benchmark_p100_c8": rb,
            "redispy_pipelined_b100_c4": py,
            "reference": rb or py,
            "reference_source": "redis-benchmark -P 100 -c 8" if rb else "redis-py pipelined",
        }

    return asyncio.run(run())


def _pythons(peers: list[Peer], cache: Path, errors: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for peer in peers:
        with console.status(f"venv for {peer.key} {peer.version}".strip()):
            try:
                out[peer.key] = venvs.ensure(peer, cache)
            except venvs.VenvError as e:
                errors.append(f"{peer.key} skipped: {e}")
                console.print(f"[yellow]{peer.key} skipped: {e}")
    return out


def run(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    errors: list[str] = []
    notes: list[str] = []
    peers = [BY_KEY[k] for k in a.peers]
    load_start = os.getloadavg()[0]
    console.print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    pythons = _pythons(peers, a.venvs, errors)
    peers = [p for p in peers if p.key in pythons]
    report: dict[str, Any] = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "method": bench.compare.__doc__,
        "pins": {p.key: list(p.requirements) for p in peers if not p.ours},
        "errors": errors,
        "notes": notes,
    }
    with embedded_server(a.appendfsync, a.allocator) as server:
        assert server.port is not None
        conn = redis.Redis.from_url(server.url)
        try:
            report["machine"] = machine(conn.info("server")) | {"valkey_malloc": server.malloc}
            console.print(f"Valkey's allocator: {server.malloc}")
            report["ceiling"] = _ceiling(server.url, server.port, a.ceiling_calls)
            ref = float(report["ceiling"]["reference"])
            console.print(
                f"EVALSHA ceiling: {ref:,.0f} calls/s ({report['ceiling']['reference_source']})"
            )
            setup = Setup(server.url, a.jobs, a.e2e_jobs, a.rate, a.concurrency, a.logs)
            # One entry per peer, plus EchoMQ lanes with several worker processes.
            entries: list[tuple[Peer, int]] = [(p, 1) for p in peers]
            if "echomq-lanes" in pythons:
                entries += [(BY_KEY["echomq-lanes"], n) for n in a.procs]
            rounds: dict[str, list[dict[str, Any]]] = {}
            with Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
                disable=not console.is_terminal,
            ) as bar:
                overall = bar.add_task("runs", total=a.rounds * len(entries))
                phase = bar.add_task("", total=1)
                for r in range(a.rounds):
                    shift = r % len(entries)
                    for peer, procs in entries[shift:] + entries[:shift]:
                        name = peer.key if procs == 1 else f"{peer.key} x{procs}"
                        bar.update(overall, description=f"round {r + 1}/{a.rounds}: {name}")

                        def progress(what: str, done: int, total: int, name: str = name) -> None:
                            bar.update(phase, description=f"  {name}: {what}", total=total)
                            bar.update(phase, completed=done)

                        key = peer.key if procs == 1 else f"x{procs}"
                        try:
                            if procs == 1:
                                row = one_round(conn, peer, pythons[peer.key], setup, progress)
                            else:
                                row = multi_round(
                                    conn, peer, pythons[peer.key], setup, procs, ref, progress
                                )
                        except DriverError as e:
                            errors.append(f"round {r + 1}, {name}: {e}")
                            console.print(f"[yellow]round {r + 1}, {name} failed: {e}")
                            row = None
                        if row is not None and row.get("extra_runs"):
                            notes.append(
                                f"round {r + 1}, {name}: {row['extra_runs']} handler runs past "
                                "the jobs enqueued (jobs delivered twice)"
                            )
                        if row is not None:
                            row["round"] = r + 1
                            rounds.setdefault(key, []).append(row)
                            _say(name, row)
                        bar.advance(overall)
        finally:
            conn.close()
    report["peers"] = {}
    for peer in peers:
        rows = rounds.get(peer.key, [])
        report["peers"][peer.key] = {
            "version": peer.version or (rows[0]["version"] if rows else ""),
            "rounds": rows,
            "median": medians([_numbers(x) for x in rows]) if rows else {},
        }
    fastest = fastest_peer({k: v["median"] for k, v in report["peers"].items()})
    report["fastest_peer"] = fastest
    if fastest is not None:
        for v in report["peers"].values():
            v["ratios"] = ratios(v["median"], report["peers"][fastest]["median"])
    report["multi"] = {
        str(n): {
            "rounds": rounds[f"x{n}"],
            "median": medians([_numbers(x) for x in rounds[f"x{n}"]]),
        }
        for n in a.procs
        if rounds.get(f"x{n}")
    }
    report["load"] = {"start": load_start, "end": os.getloadavg()[0]}
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    console.print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return report


def _numbers(row: dict[str, Any]) -> dict[str, float | None]:
    return {k: v for k, v in row.items() if k not in NOT_FIGURES and isinstance(v, int | float)}


def _say(name: str, row: dict[str, Any]) -> None:
    bits = [f"load {row['loadavg_1m']:.2f}", f"drain {row['drain_steady_per_s']:,.0f}/s"]
    if "enqueue_single_per_s" in row:
        bits += [
            f"enqueue {row['enqueue_single_per_s']:,.0f} / {row['enqueue_10_per_s']:,.0f}/s",
            f"e2e {row['e2e_p50_ms']:.1f} / {row['e2e_p99_ms']:.1f} ms",
            f"cmds {row['cmds_enqueue_per_job']:.1f} / {row['cmds_drain_per_job']:.1f}",
            f"CPU {row['worker_cpu_us_per_job']:,.0f} µs/job",
        ]
    else:
        bits.append(f"{100 * row['share_of_ceiling']:.1f} % of the ceiling")
    console.print(f"  round {row.get('round', '?')} {name}: " + ", ".join(bits))


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    try:
        report = run(a)
    except KeyboardInterrupt:
        console.print("[red]interrupted: drivers and server stopped")
        return 130
    print_tables(console, report)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        console.print(f"figures written to {a.json}")
    if a.html:
        a.html.parent.mkdir(parents=True, exist_ok=True)
        a.html.write_text(render_html(report), encoding="utf-8")
        console.print(f"report written to {a.html}")
    measured = any(v["rounds"] for v in report["peers"].values())
    return 0 if measured else 1
