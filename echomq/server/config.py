"""The server's config file: AOF always on, eviction always off, memory bounded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

Appendfsync = Literal["always", "everysec", "no"]

MAXMEMORY_SHARE = 0.25
MAXMEMORY_CAP = 8 * 1024**3  # a queue's working set, not a cache: 8 GiB is plenty
_MAXMEMORY_FLOOR = 64 * 1024**2
# A job row stays a listpack while every value fits: the default 64 bytes sends a row with a
# typical JSON payload to a hashtable at 2-3x the memory (docs/performance.md). compose.yaml
# sets the same.
HASH_MAX_LISTPACK_VALUE = 1024


def machine_memory() -> int:
    """Bytes of RAM this process may use: physical memory, or the cgroup's limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit_file).read_text().strip()))
    return total


def default_maxmemory(share: float = MAXMEMORY_SHARE, cap: int = MAXMEMORY_CAP) -> int:
    """``share`` of :func:`machine_memory`, at most ``cap``, at least 64 MiB."""
    return max(_MAXMEMORY_FLOOR, min(cap, int(machine_memory() * share)))


def quote(value: str) -> str:
    # Valkey's config parser (sdssplitargs) understands C-style escapes inside double quotes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def durable_config(
    data_dir: Path, log_path: Path, appendfsync: Appendfsync, maxmemory: int
) -> dict[str, str]:
    """The lines every embedded server runs with, whatever its address."""
    return {
        "dir": quote(str(data_dir)),
        "appendonly": "yes",
        "appenddirname": "appendonly",
        "appendfsync": appendfsync,
        "maxmemory-policy": "noeviction",  # an evicted job row is a lost job
        "maxmemory": str(maxmemory),
        "save": '""',  # the AOF is the durability; RDB snapshots would only fork and stall
        "daemonize": "no",
        "supervised": "no",
        "protected-mode": "yes",
        "logfile": quote(str(log_path)),
        "databases": "16",
        "busy-reply-threshold": "5000",  # Valkey's name for lua-time-limit
        "latency-tracking": "no",
        "hash-max-listpack-value": str(HASH_MAX_LISTPACK_VALUE),
    }


def write_config(path: Path, conf: Mapping[str, str]) -> None:
    """Write ``conf`` to ``path``, 0600 from the start: it may hold the password."""
    lines = ["# Written by echomq.server.EmbeddedValkey at every start; edits are lost."]
    lines += [f"{key} {value}" for key, value in conf.items()]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
