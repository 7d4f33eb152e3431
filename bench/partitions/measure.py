"""One run on the cluster: the masters reset, jobs enqueued over the partitions, drained by
the workers, each phase's CPU and time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rich.progress import (
    Progress,
    TaskID,
)

from bench.partitions.cpu import Snapshot, phase_figures
from bench.partitions.options import ENQUEUE_AT_ONCE, LANES, POLL_S, Master, Options
from bench.partitions.workers import worker_processes
from echomq.connection import connect
from echomq.partitions import Partitioned
from harness.cluster import ValkeyCluster


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
        enqueue = phase_figures(a, b, jobs)
        with worker_processes(cluster.url, opts, partitions) as procs:
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
        drain = phase_figures(c, d, jobs)
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
