"""What a ScoreWorker costs to start: a new process (``python -m codemojex worker``) against a
fork of ``up``'s fork server (codemojex/zygote.py). Prints figures; it is not a test.

    uv run python -m bench.bench_spawn [--rounds 8]

Each round starts one worker each way, interleaved, against one embedded Valkey and one
SQLite file: from the order to the worker's first heartbeat in Valkey (**ready**), then a
SIGTERM and its clean exit. **CPU** is the worker's whole life, start to exit: for a new
process this process's children's CPU (``RUSAGE_CHILDREN``), for a fork the fork server's
reaped children's (``cutime + cstime`` in its ``/proc/<pid>/stat``). The fork server's own
start (its imports) is paid once per ``up`` and is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import echomq
from bench.common import embedded_server, proc_stat_fields
from codemojex.config import GUESS_QUEUE
from codemojex.store import migrate, sqlite_url
from codemojex.zygote import Process, Zygote
from echomq.keys import Keys
from echomq.partitions import partition_names

WORKER = [sys.executable, "-m", "codemojex", "worker"]
READY_TIMEOUT_S = 60.0
TICK = os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _reaped_cpu(pid: int) -> float:
    """CPU of the children ``pid`` has reaped (cutime + cstime), in seconds."""
    fields = proc_stat_fields(pid)
    assert fields is not None, f"the fork server {pid} is gone"
    return (int(fields[16 - 3]) + int(fields[17 - 3])) / TICK


def _env(valkey_url: str, db: str, data: Path, worker_id: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
    return base | {
        "CODEMOJEX_VALKEY_URL": valkey_url,
        "CODEMOJEX_DATABASE_URL": db,
        "CODEMOJEX_DATA_DIR": str(data),
        "CODEMOJEX_WORKER_ID": worker_id,
    }


def one_worker(
    start: Callable[[dict[str, str]], Process],
    cpu: Callable[[], float],
    conn: redis.Redis,
    env: Callable[[str], dict[str, str]],
) -> dict[str, float]:
    """Start a worker with ``start``, wait for its heartbeat, stop it: ready s, CPU s."""
    registry = Keys(partition_names(GUESS_QUEUE, 1)[-1]).workers
    worker_id = echomq.worker_id()
    before = cpu()
    t0 = time.monotonic()
    proc = start(env(worker_id))
    try:
        while conn.zscore(registry, worker_id) is None:
            if proc.poll() is not None or time.monotonic() - t0 > READY_TIMEOUT_S:
                raise RuntimeError(f"the worker did not start (exit {proc.poll()})")
            time.sleep(0.005)
        ready = time.monotonic() - t0
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    if code != 0:
        raise RuntimeError(f"the worker exited {code}")
    return {"ready_s": ready, "cpu_s": cpu() - before}


def measure(rounds: int, progress: bool = True) -> dict[str, Any]:
    """``{"exec": [...], "fork": [...], "zygote_start": {...}}``, one entry per round."""
    out: dict[str, Any] = {"exec": [], "fork": []}
    with embedded_server("no") as server, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        db = sqlite_url(data)
        migrate(db)
        conn = redis.Redis.from_url(server.url)

        def env(worker_id: str) -> dict[str, str]:
            return _env(server.url, db, data, worker_id)

        before, t0 = _children_cpu(), time.monotonic()
        zygote = Zygote.start(env("WRK_unused"))
        out["zygote_start"] = {"ready_s": time.monotonic() - t0}
        try:
            with Progress(disable=not progress, transient=True) as bar:
                task = bar.add_task("workers started and stopped", total=2 * rounds)
                for _ in range(rounds):
                    out["exec"].append(
                        one_worker(
                            lambda e: subprocess.Popen(
                                WORKER, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
                            ),
                            _children_cpu,
                            conn,
                            env,
                        )
                    )
                    bar.advance(task)
                    out["fork"].append(
                        one_worker(
                            lambda e: zygote.spawn(WORKER, e),
                            lambda: _reaped_cpu(zygote.proc.pid),
                            conn,
                            env,
                        )
                    )
                    bar.advance(task)
        finally:
            zygote.close()
            conn.close()
        # The zygote's own CPU (its imports and its loop), once it is reaped.
        spent = _children_cpu() - before - sum(r["cpu_s"] for r in out["exec"])
        out["zygote_start"]["cpu_s"] = spent - sum(r["cpu_s"] for r in out["fork"])
    return out


def table(results: dict[str, Any]) -> Table:
    t = Table(title=f"a ScoreWorker's start, median of {len(results['exec'])} rounds")
    for col in ("started as", "ready (s)", "CPU, start to exit (s)", "CPU × new process"):
        t.add_column(col, justify="right" if col != "started as" else "left")
    base = statistics.median(r["cpu_s"] for r in results["exec"])
    for kind, label in (("exec", "a new process"), ("fork", "a fork of the fork server")):
        ready = statistics.median(r["ready_s"] for r in results[kind])
        cpu = statistics.median(r["cpu_s"] for r in results[kind])
        t.add_row(label, f"{ready:.3f}", f"{cpu:.3f}", f"{cpu / base:.2f}")
    z = results["zygote_start"]
    t.add_row("(the fork server, once per up)", f"{z['ready_s']:.3f}", f"{z['cpu_s']:.3f}", "")
    return t


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.bench_spawn", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    results = measure(args.rounds)
    console = Console()
    console.print(table(results))
    load = os.getloadavg()[0]
    console.print(f"machine: {os.cpu_count()} cores; load average {load:.2f} at the end")


if __name__ == "__main__":
    main()
