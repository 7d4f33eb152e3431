"""The floor run: its processes, their CPU, each rate's window and its figures, the table."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.common import ROOT, embedded_server, machine, machine_busy_seconds
from bench.floor.client import Client
from bench.floor.parts import WARMUP_RATE, T, console, now
from bench.floor.worker import open_db
from bench.game.http import Window
from codemojex.mash.ledger import percentile as pct
from harness.procs import proc_cpu_seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bench_floor", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,  # a terminal's Ctrl-C reaches only us; we stop the children
    )


def wait_port(port: int, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the web floor exited early (code {proc.returncode})")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError("the web floor did not listen in time")


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY":
        raise RuntimeError(f"a worker floor exited early (code {proc.wait()})")


@contextlib.contextmanager
def floor_processes(redis_url: str, players: int, workers: int, batch: int) -> Iterator[Stack]:
    procs: list[subprocess.Popen[str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="floor-db-") as tmp:
            port = free_port()
            web = child("serve-web", "--redis-url", redis_url, "--port", str(port),
                        "--players", str(players))  # fmt: skip
            procs.append(web)
            db = str(Path(tmp) / "floor.db")
            open_db(db).close()  # the schema and WAL once, before workers race for it
            for _ in range(workers):
                procs.append(child("work", "--redis-url", redis_url, "--db", db,
                                   "--batch", str(batch)))  # fmt: skip
            wait_port(port, web)
            for p in procs[1:]:
                wait_ready(p)
            yield Stack(port, web.pid, [p.pid for p in procs[1:]])
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


@dataclass
class Stack:
    port: int
    web: int
    workers: list[int]
    valkey: int = 0
    valkey_url: str = ""

    def cpu(self) -> dict[str, float]:
        def of(pid: int) -> float:
            return proc_cpu_seconds(pid) or 0.0

        # Each completion runs one HDEL: its count is the workers' batches. Read only at the
        # marks, never during the load.
        with redis.Redis.from_url(self.valkey_url) as conn:
            stats = cast(dict[str, Any], conn.info("commandstats"))
        return {
            "batches": float(stats.get("cmdstat_hdel", {}).get("calls", 0)),
            "web": of(self.web),
            "worker": sum(of(p) for p in self.workers),
            "valkey": of(self.valkey),
            "client": of(os.getpid()),
            "machine": machine_busy_seconds(),
            "t": now(),
        }


def figures(w: Window, marks: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The window's rates and latencies, and CPU ms per accepted guess by role from the first
    send until the drain ended (each role's core share over the load beside it)."""
    end = w.t0 + w.duration
    accepted = [g for g in w.guesses if g.status == 202]
    scored = [g for g in accepted if g.scored is not None]
    a2s = sorted(max(0.0, cast(float, g.scored) - cast(float, g.answered)) for g in scored)
    start, loaded, last = marks["start"], marks["loaded"], marks["end"]
    per = max(1, len(accepted))
    span = max(1e-9, loaded["t"] - start["t"])
    cpu = {
        role: {
            "ms_per_guess": round((last[role] - start[role]) * 1000 / per, 4),
            "core_share": round((loaded[role] - start[role]) / span, 3),
        }
        for role in ("web", "worker", "valkey", "client")
    }
    server = sum(cpu[r]["ms_per_guess"] for r in ("web", "worker", "valkey"))
    ours = sum(loaded[r] - start[r] for r in ("web", "worker", "valkey", "client"))
    return {
        "rate": w.rate,
        "duration_s": w.duration,
        "sent": len(w.guesses),
        "accepted": len(accepted),
        "scored": len(scored),
        "refused_or_failed": len(w.guesses) - len(accepted),
        "duplicate_scores": sum(g.scores - 1 for g in scored if g.scores > 1),
        "drained": w.drained,
        "pipelined": w.pipelined,
        "jobs_per_batch": round(len(accepted) / max(1.0, last["batches"] - start["batches"]), 2),
        "accepted_per_s": round(
            sum(1 for g in accepted if (g.answered or 0) <= end) / w.duration, 1
        ),
        "scored_per_s": round(sum(1 for g in scored if (g.scored or 0) <= end) / w.duration, 1),
        "accept_to_score_ms": {"p50": _ms(pct(a2s, 50)), "p99": _ms(pct(a2s, 99))},
        "cpu": cpu,
        "server_ms_per_guess": round(server, 4),
        "others_cores": round(max(0.0, loaded["machine"] - start["machine"] - ours) / span, 3),
        "loadavg_1m": os.getloadavg()[0],
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


async def run_rates(opts: argparse.Namespace, stack: Stack) -> list[dict[str, Any]]:
    client = Client("127.0.0.1", stack.port, opts.players)
    await client.connect(opts.sockets)
    if opts.warmup > 0:  # scripts loaded, SQLite's pages and the pool's paths warm; unrecorded
        await client.offer(WARMUP_RATE, opts.warmup, opts.schedule, lambda _: None)
    rows = []
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=opts.quiet,
            transient=True,
        ) as progress:
            for rate in opts.rates:
                task = progress.add_task(f"{rate:g}/s", total=round(rate * opts.duration))
                ticker = asyncio.create_task(_tick(progress, task, client))
                marks: dict[str, dict[str, float]] = {}
                try:
                    w = await client.offer(
                        rate,
                        opts.duration,
                        opts.schedule,
                        mark_into(marks, stack),
                        opts.connections,
                    )
                finally:
                    ticker.cancel()
                rows.append(figures(w, marks))
                progress.remove_task(task)
                client.jobs.clear()
                client.early.clear()
    finally:
        client.close()
    return rows


def mark_into(marks: dict[str, dict[str, float]], stack: Stack) -> Callable[[str], None]:
    """The probe: each role's CPU so far, under the moment's name."""

    def mark(name: str) -> None:
        marks[name] = stack.cpu()

    return mark


async def _tick(progress: Progress, task: Any, client: Client) -> None:
    while True:
        if client.window is not None:
            progress.update(task, completed=len(client.window.guesses))
        await asyncio.sleep(0.25)


def print_table(rows: list[dict[str, Any]], title: str, out: Console | None = None) -> None:
    out = out or console
    table = Table(title=title)
    columns = ("offered", "accepted/s", "scored/s", "a→s p50/p99 ms", "per batch")
    for name in (*columns, "web", "worker", "valkey", "server", "client", "others"):
        table.add_column(name, justify="right")
    for r in rows:
        c = r["cpu"]
        a2s = r["accept_to_score_ms"]
        table.add_row(
            f"{r['rate']:g}/s",
            f"{r['accepted_per_s']:.0f}",
            f"{r['scored_per_s']:.0f}",
            f"{a2s['p50']} / {a2s['p99']}",
            f"{r['jobs_per_batch']:.1f}",
            *(f"{c[k]['ms_per_guess']:.3f}" for k in ("web", "worker", "valkey")),
            f"[bold]{r['server_ms_per_guess']:.3f}[/]",
            f"{c['client']['ms_per_guess']:.3f}",
            f"{r['others_cores']:.2f}",
        )
    out.print(table)
    out.print(
        "CPU in ms per accepted guess, first send to drain end; server = web + worker + valkey;"
        " per batch = guesses per worker transaction; others = cores that processes not ours"
        " used during the load."
    )


def measure(opts: argparse.Namespace) -> dict[str, Any]:
    with embedded_server("always") as server:
        with floor_processes(server.url, opts.players, opts.workers, opts.batch) as stack:
            stack.valkey, stack.valkey_url = server.pid or 0, server.url
            rows = runner()(run_rates(opts, stack))
        with redis.Redis.from_url(server.url) as conn:
            info = conn.info("server")
    return {"machine": machine(info), "options": _options(opts), "rows": rows}


def runner() -> Callable[[Coroutine[Any, Any, T]], T]:
    """uvloop's runner where installed (the game's processes and bench_game's client use it)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency on Linux
        return asyncio.run
    return uvloop.run


def _options(opts: argparse.Namespace) -> dict[str, Any]:
    keep = (
        "rates",
        "duration",
        "warmup",
        "connections",
        "workers",
        "players",
        "sockets",
        "batch",
        "schedule",
    )
    return {k: getattr(opts, k) for k in keep}
