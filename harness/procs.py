"""Other processes from ``/proc`` (Linux): their CPU, parent, command line, resident set and
run-queue wait; the benchmarks measure with them and the tests check process trees."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "proc_argv",
    "proc_cpu_seconds",
    "proc_parent",
    "proc_rss_kb",
    "proc_runqueue_wait_seconds",
    "proc_stat_fields",
]


def proc_stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from the field after the command name (``state`` is index 0),
    or None when the process is gone. The name is skipped by its last ``)``: it may hold
    spaces and parentheses."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def proc_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far; None when
    it is gone. Children it reaped are not included."""
    fields = proc_stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_parent(pid: int) -> int | None:
    fields = proc_stat_fields(pid)
    return None if fields is None else int(fields[1])


def proc_argv(pid: int) -> list[str]:
    """The command line as a list; empty for a gone process or a kernel thread."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def proc_rss_kb(pid: int) -> int | None:
    """The process's resident set (``VmRSS`` in ``/proc/<pid>/status``), in KiB; None when
    it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_runqueue_wait_seconds(pid: int) -> float | None:
    """Seconds the process's main thread has spent runnable but waiting for a CPU (from
    ``/proc/<pid>/schedstat``): how much the machine's other work delayed it. None when
    it is gone or the kernel keeps no schedstats."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None
