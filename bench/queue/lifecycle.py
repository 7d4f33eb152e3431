"""The lifecycle (enqueue -> claim -> complete): jobs enqueued pipelined, exactly as
``Lanes.submit`` / ``Jobs.enqueue`` build their calls, then drained by consumer processes;
and its table."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis
from rich import box
from rich.table import Table

from bench.common import (
    WorkerProcs,
    command_calls,
    command_counts,
    inside_scripts,
    machine_busy_seconds,
    own_cpu_seconds,
    server_cpu_seconds,
)
from bench.queue.output import console, fmt, progress
from codemojex.guesses import guess_payload
from echomq import Queue, Settings
from echomq.ids import job_id as mint_job_id
from echomq.jobs import enqueue_call as plain_enqueue_call
from echomq.lanes import lane_enqueue_call
from echomq.scripts import Call

# The game's own guess payload as codemojex.guesses builds it for a player's own lane (the
# round and four emojis; the lane names the player): 83 bytes of JSON, past Valkey's
# default hash-max-listpack-value (64).
PAYLOAD = guess_payload(
    "PLR_01J9Z3K4WQ8N6V2T5R7X0M1C3E",
    "RND_01J9Z3K0A2B4C6D8E0F2G4H6J8",
    ["🍎", "🍎", "🍇", "🍑"],
    fifo=False,
)
POLL_S = 0.02  # how often the parent reads q.stats() while a drain runs


# Lanes.submit / Jobs.enqueue build them, and sent with Runner.run_many.


def enqueue_call(q: Queue, source: str, i: int, lanes: int, payload: bytes) -> Call:
    """One job as ``Lanes.submit`` / ``Jobs.enqueue`` would send it (the library's own call
    builders, so the benchmark cannot drift from the scripts' KEYS and ARGV): no cap,
    deadline, seq, load subject, dedup, rate limit or headers."""
    jid = mint_job_id()
    if source == "lanes":
        return lane_enqueue_call(
            q.keys, jid, f"L{i % lanes:03d}", payload, seq_ttl_ms=q.settings.seq_ttl_ms
        )
    return plain_enqueue_call(q.keys, jid, payload)


async def enqueue_pipelined(
    q: Queue,
    source: str,
    n: int,
    *,
    lanes: int = 100,
    batch: int = 500,
    inflight: int = 4,
    label: str = "enqueue",
) -> float:
    """Enqueue n jobs in pipelines of ``batch``, ``inflight`` pipelines at once; seconds."""
    payload = orjson.dumps(PAYLOAD)
    next_i = 0
    with progress() as p:
        task = p.add_task(label, total=n)

        async def pump() -> None:
            nonlocal next_i
            while next_i < n:
                lo, hi = next_i, min(n, next_i + batch)
                next_i = hi
                calls = [enqueue_call(q, source, i, lanes, payload) for i in range(lo, hi)]
                replies = await q.runner.run_many(calls)
                assert all(int(r[0]) == 1 for r in replies), "an enqueue was refused"
                p.advance(task, hi - lo)

        t0 = time.perf_counter()
        await asyncio.gather(*(pump() for _ in range(inflight)))
        return time.perf_counter() - t0


async def wait_done(
    label: str, n: int, done: Callable[[], Awaitable[int]], timeout: float
) -> tuple[float, int]:
    """Poll ``done()`` until it reaches n; returns (seconds since call, polls made)."""
    t0 = time.perf_counter()
    polls = 0
    with progress() as p:
        task = p.add_task(label, total=n)
        while True:
            got = await done()
            polls += 1
            p.update(task, completed=got)
            if got >= n:
                return time.perf_counter() - t0, polls
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"{label}: {got}/{n} done after {timeout:.0f} s")
            await asyncio.sleep(POLL_S)


async def drain(
    conn: aioredis.Redis,
    url: str,
    *,
    lib: str,
    queue: str,
    procs: int,
    n: int,
    done: Callable[[], Awaitable[int]],
    label: str,
    extra_args: list[str],
    timeout: float,
) -> dict[str, Any]:
    """Start ``procs`` worker processes, release them together, time until all n are done."""
    args = ["--lib", lib, "--url", url, "--queue", queue, *extra_args]
    # What one of the parent's progress polls runs inside its script, to take out below.
    p0 = await command_counts(conn)
    await done()
    poll = inside_scripts(p0, await command_counts(conn))
    with WorkerProcs(procs, args) as workers:
        counts0 = await command_counts(conn)
        (calls0, cmds0), cpu0 = await command_calls(conn), await server_cpu_seconds(conn)
        busy0, mine0 = machine_busy_seconds(), own_cpu_seconds()
        workers.go()
        seconds, polls = await wait_done(label, n, done, timeout)
        busy1, mine1 = machine_busy_seconds(), own_cpu_seconds()
        (calls1, cmds1), cpu1 = await command_calls(conn), await server_cpu_seconds(conn)
        counts1 = await command_counts(conn)
        summaries = workers.stop()
    inside = inside_scripts(counts0, counts1, {k: v * (polls + 1) for k, v in poll.items()})
    worker_cpu = sum(float(s.get("cpu_s", 0)) for s in summaries)
    server_cpu = cpu1 - cpu0
    # Whatever else kept the machine's cores busy meanwhile (other programs): not us, not
    # the server, not the workers.
    other_cpu = max(0.0, (busy1 - busy0) - (mine1 - mine0) - server_cpu - worker_cpu)
    return {
        "seconds": round(seconds, 3),
        "jobs_per_s": round(n / seconds, 1),
        # The parent's stats polls are script calls too; take them out.
        "script_calls": calls1 - calls0 - (polls + 1 if lib == "echomq" else 0),
        # Every command the server ran per job, the ones inside scripts included.
        "server_cmds_per_job": round((cmds1 - cmds0) / n, 1),
        # The commands run inside the scripts (and any a consumer sends besides its
        # script calls) per job, by name; the parent's polls taken out.
        "inside_per_job": {k: round(v / n, 2) for k, v in inside.items()},
        "inside_total_per_job": round(sum(inside.values()) / n, 2),
        "server_cpu_pct": round(100 * server_cpu / seconds, 1),
        "workers_cpu_pct": round(100 * worker_cpu / seconds, 1),
        "other_cpu_pct": round(100 * other_cpu / seconds, 1),
        # CPU cost of one job: 1e6 / server_us_per_job is the rate at which Valkey's one
        # thread would saturate with consumers that cost nothing.
        "server_us_per_job": round(1e6 * server_cpu / n, 1),
        "worker_us_per_job": round(1e6 * worker_cpu / n, 1),
        "completed_by_workers": [s.get("completed") for s in summaries],
    }


async def echomq_lifecycle(
    conn: aioredis.Redis,
    url: str,
    *,
    fsync: str,
    source: str,
    procs: int,
    n: int,
    concurrency: int,
    batch: int,
    prefetch: int,
    lanes: int,
    ceiling_ref: float,
) -> dict[str, Any]:
    await conn.flushall()
    q = Queue(conn, f"bench-{fsync}-{source}-{procs}", Settings())
    e0 = await command_counts(conn)
    enq_s = await enqueue_pipelined(q, source, n, lanes=lanes, label=f"enqueue {source} {n}")
    enq_inside = inside_scripts(e0, await command_counts(conn))

    async def completed() -> int:
        return int((await q.stats(max_lanes=0))["counters"].get("completed", 0))

    r = await drain(
        conn,
        url,
        lib="echomq",
        queue=q.name,
        procs=procs,
        n=n,
        done=completed,
        label=f"drain {source} x{procs} ({fsync})",
        extra_args=[
            "--source",
            source,
            "--concurrency",
            str(concurrency),
            "--batch",
            str(batch),
            "--prefetch",
            str(prefetch),
        ],
        timeout=max(60.0, n / 500),
    )
    stats = await q.stats(max_lanes=0)
    assert stats["counters"].get("completed") == n, stats
    assert stats["pending"] == stats["active"] == stats["dead"] == 0, stats
    return {
        "lib": "echomq",
        "appendfsync": fsync,
        "source": source,
        "lanes": lanes if source == "lanes" else 0,
        "procs": procs,
        "jobs": n,
        "concurrency": concurrency,
        "batch": batch,
        "prefetch": prefetch,
        "enqueue_per_s": round(n / enq_s, 1),
        "enqueue_inside_per_job": {k: round(v / n, 2) for k, v in enq_inside.items()},
        "enqueue_inside_total_per_job": round(sum(enq_inside.values()) / n, 2),
        **r,
        "script_calls_per_job": round(r["script_calls"] / n, 3),
        "claims": int(stats["counters"].get("claimed", 0)),
        "ratio_to_ceiling": round(r["jobs_per_s"] / ceiling_ref, 4),
    }


def _pct(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f"{r[key]:.0f}%"


# (header, getter, kept in a narrow terminal)
_LIFECYCLE_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str], bool]] = [
    ("fsync", lambda r: r["appendfsync"], True),
    ("lib", lambda r: r["lib"], True),
    ("source", lambda r: r["source"] + (f" ({r['lanes']})" if r.get("lanes") else ""), True),
    ("procs", lambda r: str(r["procs"]), True),
    ("jobs", lambda r: fmt(r["jobs"]), False),
    ("enqueue/s", lambda r: fmt(r["enqueue_per_s"]), True),
    ("jobs/s", lambda r: f"[bold]{fmt(r['jobs_per_s'])}", True),
    ("ratio", lambda r: f"{r['ratio']:.4f}", True),
    (
        "scripts/job",
        lambda r: (
            "-" if r.get("script_calls_per_job") is None else f"{r['script_calls_per_job']:.2f}"
        ),
        False,
    ),
    ("cmds/job", lambda r: f"{r['server_cmds_per_job']:.1f}", False),
    ("valkey µs/job", lambda r: f"{r['server_us_per_job']:.0f}", True),
    ("workers µs/job", lambda r: f"{r['worker_us_per_job']:.0f}", True),
    ("valkey CPU", _pct("server_cpu_pct"), False),
    ("workers CPU", _pct("workers_cpu_pct"), False),
    ("other CPU", _pct("other_cpu_pct"), True),
]


# A narrow terminal gets fewer, shorter columns.
_NARROW_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str], bool]] = [
    ("run", lambda r: f"{r['lib']} {r['source']} {r['appendfsync']}", True),
    ("procs", lambda r: str(r["procs"]), True),
    ("enq/s", lambda r: fmt(r["enqueue_per_s"]), True),
    ("jobs/s", lambda r: f"[bold]{fmt(r['jobs_per_s'])}", True),
    ("ratio", lambda r: f"{r['ratio']:.4f}", True),
    ("vk µs", lambda r: f"{r['server_us_per_job']:.0f}", True),
    ("py µs", lambda r: f"{r['worker_us_per_job']:.0f}", True),
    ("other", _pct("other_cpu_pct"), True),
]


def print_lifecycle(rows: list[dict[str, Any]], ceiling_ref: float, title: str) -> None:
    wide = console.width >= 150
    columns = _LIFECYCLE_COLUMNS if wide else _NARROW_COLUMNS
    if wide:
        t = Table(title=title)
    else:
        t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for header, _, _ in columns:
        t.add_column(
            header,
            justify="left" if header in ("fsync", "lib", "source", "run") else "right",
            no_wrap=not wide,
        )
    for r in rows:
        r = {**r, "ratio": r["jobs_per_s"] / ceiling_ref}
        t.add_row(*(get(r) for _, get, _ in columns))
    console.print(t)
    console.print(
        "  [dim]µs/job = CPU per job of Valkey / of the consumer processes; other CPU = the "
        "machine's busy CPU not used by Valkey, the consumers or this process (other programs, "
        "kernel network softirqs), as % of one core."
        + ("" if wide else " 150+ columns show more; --json has all.")
    )
