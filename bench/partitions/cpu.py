"""Each master's CPU from ``/proc`` (its main thread, where commands run), snapshotted around a
phase."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import machine_busy_seconds
from bench.partitions.options import Master
from harness.procs import proc_cpu_seconds


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


def phase_figures(a: Snapshot, b: Snapshot, jobs: int) -> dict[str, Any]:
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
