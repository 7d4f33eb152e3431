"""The ``up`` under test: started with the environment the run asks for, its processes by role,
and their CPU, run-queue wait and resident set read from ``/proc``."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import machine_busy_seconds
from bench.game.options import now
from harness.procs import (
    proc_argv,
    proc_cpu_seconds,
    proc_parent,
    proc_rss_kb,
    proc_runqueue_wait_seconds,
)
from harness.running import Up, descendants


def start_up(data_dir: Path, *args: str, env: dict[str, str], root: Path | None = None) -> Up:
    """A ready ``up``; everything it started is killed if it does not get ready."""
    up = Up(data_dir, *args, env=env, **({"root": root} if root else {}))
    try:
        return up.start().wait_ready(60)
    except BaseException:
        up.kill_everything()
        raise


def web_rss_kb(roles: dict[int, str]) -> tuple[int, int]:
    """(the web processes' resident sets summed in KiB, how many web processes)."""
    rss = [proc_rss_kb(pid) for pid, role in roles.items() if role == "web"]
    got = [r for r in rss if r is not None]
    return sum(got), len(got)


def role_of(pid: int, up_pid: int) -> str | None:
    """``up``, ``web``, ``worker``, ``valkey``, ``postgres``; None: ask its parent."""
    if pid == up_pid:
        return "up"
    argv = proc_argv(pid)
    if not argv:
        return None
    first = argv[0]
    if "valkey-server" in first or "redis-server" in first:
        return "valkey"
    if Path(first.split()[0]).name == "postgres" or first.startswith("postgres:"):
        return "postgres"
    for tok, nxt in itertools.pairwise(argv):
        if (tok == "codemojex" or tok.endswith("/codemojex")) and nxt in ("web", "worker", "up"):
            return nxt
    return None


class Processes:
    """The pids to watch and what each one is: ``up``'s tree, extra trees (a throwaway
    PostgreSQL), and this client."""

    def __init__(self, up_pid: int, extra: Mapping[str, int | list[int]] | None = None) -> None:
        self.up_pid = up_pid
        self.extra = extra or {}  # role: the root pid(s) of its trees

    def roles(self) -> dict[int, str]:
        found = {self.up_pid} | descendants(self.up_pid)
        roles: dict[int, str] = {}

        def role(pid: int, depth: int = 0) -> str:
            if pid in roles:
                return roles[pid]
            r = role_of(pid, self.up_pid)
            if r is None:
                parent = proc_parent(pid)
                r = role(parent, depth + 1) if parent in found and depth < 8 else "other"
            roles[pid] = r
            return r

        for pid in sorted(found):
            role(pid)
        for name, roots in self.extra.items():
            for root in [roots] if isinstance(roots, int) else roots:
                for pid in {root} | descendants(root):
                    roles[pid] = name
        roles[os.getpid()] = "client"
        return roles

    def snapshot(self) -> CpuSnapshot:
        roles = self.roles()
        cpu = {pid: proc_cpu_seconds(pid) for pid in roles}
        wait = {pid: proc_runqueue_wait_seconds(pid) for pid in roles}
        return CpuSnapshot(
            now(),
            machine_busy_seconds(),
            roles,
            {pid: c for pid, c in cpu.items() if c is not None},
            {pid: w for pid, w in wait.items() if w is not None},
        )


@dataclass
class CpuSnapshot:
    t: float
    machine_busy: float
    roles: dict[int, str]
    cpu: dict[int, float]
    wait: dict[int, float]  # the main thread's time runnable but not running


def cpu_figures(
    before: CpuSnapshot, loaded: CpuSnapshot, after: CpuSnapshot, accepted: int
) -> dict[str, Any]:
    """CPU per process from the first send (``before``) until the drain ended (``after``):
    seconds and ms per accepted guess; and its share of one core while the load ran (until
    ``loaded``), which tells who was saturated. By role too (every worker summed), and the
    machine's CPU that none of ours used, during the load."""
    span = max(1e-9, loaded.t - before.t)
    per = max(1, accepted)
    procs: list[dict[str, Any]] = []
    # A process that started in the window counts from zero; one that ended in it is lost
    # (its role is named in "ended").
    roles = {**after.roles, **before.roles}
    for pid, role in sorted(roles.items(), key=lambda kv: (kv[1], kv[0])):
        if pid in after.cpu and (pid in before.cpu or pid not in before.roles):
            start = before.cpu.get(pid, 0.0)
            used = max(0.0, after.cpu[pid] - start)
            busy_s = max(0.0, loaded.cpu.get(pid, start) - start)
            waited = (
                loaded.wait[pid] - before.wait.get(pid, 0.0)
                if pid in loaded.wait and pid in after.wait
                else None
            )
            procs.append(
                {
                    "role": role,
                    "pid": pid,
                    "cpu_s": round(used, 4),
                    "ms_per_guess": round(used * 1000 / per, 4),
                    "load_cpu_s": round(busy_s, 4),
                    "core_share": round(busy_s / span, 4),
                    # its main thread's share of the load spent waiting for a CPU
                    "runqueue_wait_share": None if waited is None else round(waited / span, 4),
                }
            )
    by_role: dict[str, list[float]] = {}
    for p in procs:
        acc = by_role.setdefault(p["role"], [0.0, 0.0])
        acc[0] += p["cpu_s"]
        acc[1] += p["load_cpu_s"]
    ours = sum(a[0] for a in by_role.values())
    ours_loaded = sum(a[1] for a in by_role.values())
    busy = max(0.0, loaded.machine_busy - before.machine_busy)
    started = sorted(r for pid, r in after.roles.items() if pid not in before.roles)
    ended = sorted(r for pid, r in before.roles.items() if pid not in after.cpu)
    return {
        "load_s": round(span, 3),
        "window_s": round(after.t - before.t, 3),
        "processes": procs,
        "workers": [p for p in procs if p["role"] == "worker"],
        "roles": {
            r: {
                "cpu_s": round(a[0], 4),
                "ms_per_guess": round(a[0] * 1000 / per, 4),
                "core_share": round(a[1] / span, 4),
            }
            for r, a in sorted(by_role.items())
        },
        "ours_ms_per_guess": round(ours * 1000 / per, 4),
        "client_runqueue_wait_share": next(
            (p["runqueue_wait_share"] for p in procs if p["pid"] == os.getpid()), None
        ),
        "machine_busy_cores": round(busy / span, 3),
        "others_cores": round(max(0.0, busy - ours_loaded) / span, 3),
        # processes that came (counted from zero) or went (their CPU lost) in the window
        "started": started,
        "ended": ended,
    }


def up_args(a: argparse.Namespace, web_processes: int | None = None) -> list[str]:
    args = ["--workers", str(a.workers), "--round-seconds", str(a.round_seconds)]
    if web_processes is not None:
        args += ["--web-processes", str(web_processes)]
    for extra in a.up_arg:
        args += shlex.split(extra)
    return args


@contextlib.contextmanager
def database(
    a: argparse.Namespace,
) -> Iterator[tuple[Callable[[], str | None], Callable[[], dict[str, int]]]]:
    """(a URL for the next ``up``: None for SQLite, the roots of its processes to watch)."""
    if not a.postgres:
        yield (lambda: a.database_url), dict
        return
    from harness.pg import PgCluster

    cluster = PgCluster.start()
    try:

        def roots() -> dict[str, int]:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return {
                    "postgres": int((cluster.datadir / "postmaster.pid").read_text().split()[0])
                }
            return {}

        yield cluster.create_database, roots
    finally:
        cluster.stop()
