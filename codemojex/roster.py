"""The admin page's list of workers: alive ones from EchoMQ's registry, dead ones (and why
they died) from what supervisors and the workers themselves recorded (codemojex.control)."""

from __future__ import annotations

from typing import cast

import echomq
import echomq.registry
from codemojex import control, keys
from codemojex.views import WorkerView
from echomq.codec import text
from echomq.connection import Client


async def worker_views(conn: Client, queues: echomq.Partitioned) -> list[WorkerView]:
    """Every worker known recently: alive ones from the registry, dead ones with why."""
    alive = {w.worker_id: w for w in await queues.workers()}
    known = await _members(conn, keys.KNOWN)
    exits = await control.exits(conn)
    killed = await control.killed(conn)
    now = await queues.server_time_ms()
    first = queues.partitions[0]  # a worker registers on every partition
    out: list[WorkerView] = []
    for wid in dict.fromkeys([*known, *alive]):
        # Ids are never reused, so a recorded exit is final even while the registry
        # still lists the worker (until its heartbeat lapses).
        w = alive.get(wid) if wid not in exits else None
        if w:
            meta = w.meta
        else:  # gone: its row, while it outlives the registry entry, says who it was
            gone = await echomq.registry.worker(first, wid)
            meta = dict(gone.meta) if gone is not None else {}
        job_id = meta.get("job_id") or None
        lease_ms = None
        if w and job_id:
            info = await queues.get(job_id)
            if info and info.state == "active" and info.worker_id == wid and info.lease_until_ms:
                lease_ms = max(0, info.lease_until_ms - now)
        ex = exits.get(wid)
        # Spawned but not yet heartbeating (a second or two of start-up): it lives.
        starting = w is None and ex is None and not meta
        out.append(
            {
                "worker_id": wid,
                "pid": int(meta["pid"]) if meta.get("pid") else None,
                "host": meta.get("host"),
                "state": (meta.get("state") or "idle") if w or starting else "dead",
                "job_id": job_id if w else None,
                "lease_remaining_ms": lease_ms,
                "jobs_done": int(meta.get("scored") or meta.get("jobs_done") or 0),
                "alive": w is not None or starting,
                "exit_reason": ex["reason"]
                if ex
                else (
                    None
                    if w or starting
                    else ("stopped" if meta.get("stopped") else "heartbeat lapsed")
                ),
                # Killed by an order: the jobs it was scoring at that instant, each of which
                # the reaper must hand to another worker.
                "killed_holding": killed.get(wid),
            }
        )
    return out


async def _members(conn: Client, key: str) -> list[str]:
    """Every member of the sorted set ``key``, as text, in score order."""
    raw = cast(list[bytes], await conn.zrange(key, 0, -1))
    return [text(x) for x in raw]
