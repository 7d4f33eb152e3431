"""EchoMQ benchmark: prints figures, it is not a test.

    uv run python -m bench.bench_echomq [--jobs N] [--appendfsync always|everysec|no] [--json OUT]
    uv run python -m bench.bench_echomq --memory-only    # section 3's memory alone

Starts its own ``valkey-server`` (``echomq.server.EmbeddedValkey``, AOF on) in a temp dir and
measures, in one run:

1. Valkey's own ceiling: a trivial ``EVALSHA`` (``return 1``, one key) with ``redis-benchmark``
   (Debian's ``redis-tools``; skipped when absent) and with a pipelined redis-py asyncio client.
2. Lifecycle throughput (enqueue -> claim -> complete), jobs/s: N jobs enqueued pipelined
   (rate measured apart), then drained by echomq ``Consumer``s in 1, 2 and 4 separate
   processes, from ``source="lanes"`` (100 lanes) and ``source="jobs"``; the clock runs from
   "go" to the moment ``q.stats()`` counts all N completed. Printed beside the EVALSHA ceiling
   as a ratio. Repeated under ``appendfsync always`` unless that is the main mode already.
3. Valkey memory per pending job, 100,000 pending jobs with the game's guess payload: the
   game's shape (a lane per player, at most 100 pending each), 100 deep lanes, and plain;
   then enqueue -> completed event latency at a steady 500 jobs/s, one consumer process.
4. The same lifecycle with SAQ and arq on the same server, when importable
   (``uv pip install saq`` / ``uv pip install --no-deps arq``; arq pins redis<6 but runs on
   the project's redis-py; or pass ``--install-competitors``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import importlib.util
import io
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from bench.common import (
    WorkerProcs,
    command_calls,
    command_counts,
    embedded_server,
    inside_scripts,
    machine,
    machine_busy_seconds,
    machine_cores,
    own_cpu_seconds,
    server_cpu_seconds,
    signals_raise_keyboardinterrupt,
    used_memory,
)
from codemojex.guesses import guess_payload
from echomq import Queue, Settings
from echomq.codec import text
from echomq.ids import job_id as mint_job_id
from echomq.jobs import enqueue_call as plain_enqueue_call
from echomq.lanes import lane_enqueue_call
from echomq.scripts import Call

console = Console()
if not console.is_terminal:  # piped or captured: wide enough for the tables, no live bars
    console = Console(width=190)

TRIVIAL = "return 1"
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


def progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def fmt(n: float) -> str:
    return f"{n:,.0f}"


# ---------------------------------------------------------------------------------------------
# 1. The ceiling


def redis_benchmark(port: int, sha: str, *, n: int, clients: int, pipeline: int) -> float | None:
    exe = shutil.which("redis-benchmark") or shutil.which("valkey-benchmark")
    if exe is None:
        return None
    cmd = [
        exe,
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-n",
        str(n),
        "-c",
        str(clients),
        "-P",
        str(pipeline),
        "--csv",
        "EVALSHA",
        sha,
        "1",
        "bench:k",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [r for r in csv.reader(io.StringIO(out)) if len(r) > 1]
    return float(rows[-1][1])  # rows[0] is the header: "test","rps",...


async def redispy_ceiling(url: str, sha: str, *, total: int, conns: int, batch: int) -> float:
    clients = [aioredis.from_url(url) for _ in range(conns)]
    try:
        await asyncio.gather(*(c.ping() for c in clients))
        rounds = max(1, total // (conns * batch))

        async def one(c: aioredis.Redis) -> None:
            for _ in range(rounds):
                pipe = c.pipeline(transaction=False)
                for _ in range(batch):
                    pipe.evalsha(sha, 1, "bench:k")
                await pipe.execute()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(c) for c in clients))
        return rounds * conns * batch / (time.perf_counter() - t0)
    finally:
        for c in clients:
            await c.aclose()


async def ceiling(conn: aioredis.Redis, port: int, url: str) -> dict[str, Any]:
    sha = await conn.script_load(TRIVIAL)
    out: dict[str, Any] = {"script": TRIVIAL, "keys": 1}
    with progress() as p:
        p.add_task("ceiling: trivial EVALSHA", total=None)
        try:
            (c0, _), cpu0 = await command_calls(conn), await server_cpu_seconds(conn)
            out["redis_benchmark_p100_c8"] = redis_benchmark(
                port, sha, n=400_000, clients=8, pipeline=100
            )
            (c1, _), cpu1 = await command_calls(conn), await server_cpu_seconds(conn)
            if out["redis_benchmark_p100_c8"] and c1 > c0:
                # Valkey's CPU per trivial call, to weigh a job's scripts against.
                out["server_us_per_trivial_call"] = round(1e6 * (cpu1 - cpu0) / (c1 - c0), 3)
            out["redis_benchmark_p1_c32"] = redis_benchmark(
                port, sha, n=100_000, clients=32, pipeline=1
            )
        except (subprocess.SubprocessError, OSError, ValueError, IndexError) as e:
            console.print(f"[yellow]redis-benchmark failed: {e}")
            out["redis_benchmark_p100_c8"] = out["redis_benchmark_p1_c32"] = None
        (c0, _), cpu0 = await command_calls(conn), await server_cpu_seconds(conn)
        out["redispy_pipelined_b100_c4"] = await redispy_ceiling(
            url, sha, total=200_000, conns=4, batch=100
        )
        (c1, _), cpu1 = await command_calls(conn), await server_cpu_seconds(conn)
        out.setdefault("server_us_per_trivial_call", round(1e6 * (cpu1 - cpu0) / (c1 - c0), 3))
    # The reference for the ratios: the server's own ceiling when a client can keep it fed.
    out["reference"] = out["redis_benchmark_p100_c8"] or out["redispy_pipelined_b100_c4"]
    out["reference_source"] = (
        "redis-benchmark -P 100 -c 8" if out["redis_benchmark_p100_c8"] else "redis-py pipelined"
    )
    return out


def print_ceiling(c: dict[str, Any]) -> None:
    t = Table(title="1. Valkey ceiling: trivial EVALSHA (`return 1`, 1 key), same server")
    t.add_column("client")
    t.add_column("calls/s", justify="right")
    rb = "redis-benchmark"
    missing = "skipped: apt-get install redis-tools"
    for label, key in (
        (f"{rb} -P 100 -c 8 (pipelined)", "redis_benchmark_p100_c8"),
        (f"{rb} -P 1 -c 32 (one call per round trip)", "redis_benchmark_p1_c32"),
        (
            "redis-py asyncio + hiredis, pipelines of 100, 4 connections",
            "redispy_pipelined_b100_c4",
        ),
    ):
        v = c.get(key)
        t.add_row(label, fmt(v) if v else missing)
    console.print(t)
    console.print(
        f"  reference ceiling for ratios: {fmt(c['reference'])}/s ({c['reference_source']}); "
        f"Valkey spends {c['server_us_per_trivial_call']:.2f} µs of CPU per trivial call"
    )


# ---------------------------------------------------------------------------------------------
# Enqueue, pipelined. EchoMQ has no bulk enqueue yet, so the calls are built here exactly as
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


# ---------------------------------------------------------------------------------------------
# 2. Lifecycle


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


# ---------------------------------------------------------------------------------------------
# 3. Memory


async def flush_sync(conn: Any) -> None:
    """FLUSHALL SYNC: a lazy (background) flush would still be freeing the last run's keys
    while the next measurement starts."""
    await conn.execute_command("FLUSHALL", "SYNC")


def game_enqueue_call(q: Queue, i: int, lanes: int, payload: bytes) -> Call:
    """A guess as codemojex.guesses submits it: the player's own lane (a PLR_ id), numbered
    within the round (so the row has a ``seq``), the lane its own load subject."""
    return lane_enqueue_call(
        q.keys,
        mint_job_id(),
        f"PLR_{i % lanes:026d}",
        payload,
        seq_scope=str(PAYLOAD["round_id"]),
        seq_ttl_ms=q.settings.seq_ttl_ms,
    )


async def memory(conn: aioredis.Redis, n: int, lanes: int) -> list[dict[str, Any]]:
    """Valkey memory per pending job: the game's shape (a lane per player, at most 100
    pending each: the default lane cap), ``lanes`` deep lanes, and the plain queue."""
    payload = orjson.dumps(PAYLOAD)
    out = []
    for source, n_lanes in (("game", max(1, n // 100)), ("lanes", lanes), ("jobs", 0)):
        await flush_sync(conn)
        await asyncio.sleep(0.2)
        q = Queue(conn, f"mem-{source}")
        before = await used_memory(conn)
        with progress() as p:
            task = p.add_task(f"memory: {n} pending {source}", total=n)
            for lo in range(0, n, 1000):
                hi = min(n, lo + 1000)
                if source == "game":
                    calls = [game_enqueue_call(q, i, n_lanes, payload) for i in range(lo, hi)]
                else:
                    calls = [enqueue_call(q, source, i, n_lanes, payload) for i in range(lo, hi)]
                replies = await q.runner.run_many(calls)
                assert all(int(r[0]) == 1 for r in replies), "an enqueue was refused"
                p.advance(task, hi - lo)
        await asyncio.sleep(0.2)
        after = await used_memory(conn)
        first_lane = f"PLR_{0:026d}" if source == "game" else "L000"
        sample = await conn.zrange(
            q.keys.pending if source == "jobs" else q.keys.lane(first_lane), 0, 0
        )
        jk = q.keys.job(text(cast(bytes, sample[0])))
        row_bytes = await conn.memory_usage(jk, samples=0)
        encoding = text(await conn.object("encoding", jk))
        out.append(
            {
                "source": source,
                "lanes": n_lanes,
                "jobs": n,
                "payload_bytes": len(payload),
                "used_memory_delta": after - before,
                "bytes_per_job": round((after - before) / n, 1),
                "job_row_bytes": row_bytes,
                "job_row_encoding": encoding,
            }
        )
    await conn.flushall()
    return out


def print_memory(rows: list[dict[str, Any]]) -> None:
    t = Table(title="3. Valkey memory per pending job (INFO used_memory delta / N)")
    cols = ("queue", "pending", "payload B", "Δ used_memory", "bytes/job", "job row B", "row as")
    for col in cols:
        t.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        name = {
            "game": f"game: a lane per player ({r['lanes']}), seq",
            "lanes": f"lanes ({r['lanes']})",
        }.get(r["source"], "plain")
        t.add_row(
            name,
            fmt(r["jobs"]),
            str(r["payload_bytes"]),
            fmt(r["used_memory_delta"]),
            f"[bold]{r['bytes_per_job']:.0f}",
            fmt(r["job_row_bytes"]),
            r["job_row_encoding"],
        )
    console.print(t)
    console.print(
        "  [dim]job row B = MEMORY USAGE of one job's hash; the rest is its entry in "
        "the lane/pending sorted set and the key-space overhead."
    )


# ---------------------------------------------------------------------------------------------
# 3b. Latency at a steady rate


async def latency(
    conn: aioredis.Redis, url: str, *, source: str, rate: float, seconds: float, lanes: int
) -> dict[str, Any]:
    """One consumer process; jobs enqueued one at a time at ``rate``/s for ``seconds``; each
    job's time from its enqueue call to its ``completed`` event read back by this process
    (XREAD BLOCK on a connection of its own), on one clock."""
    await flush_sync(conn)
    q = Queue(conn, f"lat-{source}")
    payload = orjson.dumps(PAYLOAD)
    n = max(1, int(rate * seconds))
    sent: dict[str, float] = {}
    took: list[float] = []
    reader = aioredis.from_url(url)
    args = ["--lib", "echomq", "--url", url, "--queue", q.name, "--source", source]
    try:
        with WorkerProcs(1, args) as workers:
            workers.go()

            async def read() -> None:
                last = "$"
                while len(took) < n:
                    got: Any = await reader.xread({q.keys.events: last}, block=1000, count=1000)
                    now = time.perf_counter()
                    for _, entries in got:
                        for event_id, fields in entries:
                            last = text(event_id)
                            if fields.get(b"type") == b"completed":
                                took.append(now - sent[text(fields[b"job_id"])])

            async def send() -> None:
                t0 = time.perf_counter()
                for i in range(n):
                    wait = t0 + i / rate - time.perf_counter()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    call = enqueue_call(q, source, i, lanes, payload)
                    sent[text(cast(Any, call[2][0]))] = time.perf_counter()
                    await q.runner.run(*call)

            reading = asyncio.create_task(read())
            # the consumer registered and parked, the reader blocked on the stream's end
            await asyncio.sleep(1.0)
            await send()
            await asyncio.wait_for(reading, timeout=max(10.0, seconds))
            workers.stop()
    finally:
        await reader.aclose()
    took.sort()

    def pct(p: float) -> float:
        return round(1000 * took[min(len(took) - 1, int(p * len(took)))], 2)

    return {
        "source": source,
        "rate": rate,
        "jobs": n,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * took[-1], 2),
    }


def print_latency(rows: list[dict[str, Any]]) -> None:
    t = Table(title="3b. Enqueue -> completed event at a steady rate, one consumer process")
    for col in ("source", "rate/s", "jobs", "p50 ms", "p99 ms", "max ms"):
        t.add_column(col, justify="left" if col == "source" else "right")
    for r in rows:
        t.add_row(
            r["source"],
            fmt(r["rate"]),
            fmt(r["jobs"]),
            f"{r['p50_ms']:.2f}",
            f"[bold]{r['p99_ms']:.2f}",
            f"{r['max_ms']:.2f}",
        )
    console.print(t)


# ---------------------------------------------------------------------------------------------
# 4. Competitors on the same server


async def saq_lifecycle(
    conn: aioredis.Redis, url: str, *, procs: int, n: int, concurrency: int, fsync: str
) -> dict[str, Any]:
    from saq import Queue as SaqQueue

    await conn.flushall()
    name = f"saq-{procs}"
    sq = SaqQueue.from_url(url, name=name)
    await sq.connect()
    try:
        enq_s = await enqueue_each(f"saq enqueue {n}", n, lambda: sq.enqueue("noop"))
    finally:
        await sq.disconnect()
    incomplete = f"saq:{name}:incomplete"

    async def done() -> int:
        return n - int(await conn.zcard(incomplete))

    r = await drain(
        conn,
        url,
        lib="saq",
        queue=name,
        procs=procs,
        n=n,
        done=done,
        label=f"saq drain x{procs}",
        extra_args=["--concurrency", str(concurrency)],
        timeout=max(60.0, n / 100),
    )
    return {
        "lib": "saq",
        "appendfsync": fsync,
        "source": "queue",
        "procs": procs,
        "jobs": n,
        "concurrency": concurrency,
        "enqueue_per_s": round(n / enq_s, 1),
        **r,
    }


async def arq_lifecycle(
    conn: aioredis.Redis, url: str, *, procs: int, n: int, concurrency: int, fsync: str
) -> dict[str, Any]:
    from arq.connections import RedisSettings, create_pool

    await conn.flushall()
    name = f"arq-{procs}"
    pool = await create_pool(RedisSettings.from_dsn(url), default_queue_name=name)
    try:
        enq_s = await enqueue_each(f"arq enqueue {n}", n, lambda: pool.enqueue_job("noop"))
    finally:
        await pool.aclose()

    async def done() -> int:
        return n - int(await conn.zcard(name))

    r = await drain(
        conn,
        url,
        lib="arq",
        queue=name,
        procs=procs,
        n=n,
        done=done,
        label=f"arq drain x{procs}",
        extra_args=["--concurrency", str(concurrency)],
        timeout=max(60.0, n / 100),
    )
    return {
        "lib": "arq",
        "appendfsync": fsync,
        "source": "queue",
        "procs": procs,
        "jobs": n,
        "concurrency": concurrency,
        "enqueue_per_s": round(n / enq_s, 1),
        **r,
    }


async def enqueue_each(
    label: str, n: int, one: Callable[[], Awaitable[Any]], inflight: int = 32
) -> float:
    """Call ``one()`` n times, ``inflight`` at once (for libraries without bulk enqueue);
    returns seconds. A failure cancels the rest (TaskGroup), so nothing is left dangling."""
    left = n
    with progress() as p:
        task = p.add_task(label, total=n)

        async def pump() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await one()
                p.advance(task)

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for _ in range(inflight):
                tg.create_task(pump())
        return time.perf_counter() - t0


def install_competitors() -> None:
    uv = shutil.which("uv")
    base = (
        [uv, "pip", "install", "--python", sys.executable]
        if uv
        else [sys.executable, "-m", "pip", "install"]
    )
    # arq pins redis<6; installed without its deps it runs on the project's redis-py.
    for extra in (["saq"], ["--no-deps", "arq"]):
        subprocess.run([*base, *extra], check=False)


# ---------------------------------------------------------------------------------------------
# The run


async def run(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    report: dict[str, Any] = {"args": vars(a).copy()}
    with embedded_server(a.appendfsync) as server:
        assert server.port is not None
        conn = aioredis.from_url(server.url)
        try:
            info = await conn.info("server")
            report["machine"] = machine(info)
            print_machine(report["machine"], server)
            if a.memory_only:
                report["memory"] = await memory(conn, a.memory_jobs, a.lanes)
                print_memory(report["memory"])
                return report

            c = await ceiling(conn, server.port, server.url)
            report["ceiling"] = c
            print_ceiling(c)
            ref = float(c["reference"])

            modes = [a.appendfsync]
            if a.also_always and a.appendfsync != "always":
                modes.append("always")
            rows: list[dict[str, Any]] = []
            for fsync in modes:
                await conn.config_set("appendfsync", fsync)
                sources = ("lanes", "jobs") if fsync == a.appendfsync else ("lanes",)
                for source in sources:
                    for procs in a.procs:
                        rows.append(
                            await echomq_lifecycle(
                                conn,
                                server.url,
                                fsync=fsync,
                                source=source,
                                procs=procs,
                                n=a.jobs,
                                concurrency=a.concurrency,
                                batch=a.batch,
                                prefetch=a.prefetch,
                                lanes=a.lanes,
                                ceiling_ref=ref,
                            )
                        )
            await conn.config_set("appendfsync", a.appendfsync)
            report["lifecycle"] = rows
            print_lifecycle(rows, ref, "2. Lifecycle enqueue -> claim -> complete (no-op handler)")
            explain_ratio(rows, c, a.batch)
            print_commands(rows)

            report["memory"] = await memory(conn, a.memory_jobs, a.lanes)
            print_memory(report["memory"])

            if a.latency_seconds > 0:
                report["latency"] = [
                    await latency(
                        conn,
                        server.url,
                        source=source,
                        rate=a.latency_rate,
                        seconds=a.latency_seconds,
                        lanes=a.lanes,
                    )
                    for source in ("lanes", "jobs")
                ]
                print_latency(report["latency"])

            report["competitors"] = await competitors(conn, server.url, a, ref, rows)
        finally:
            await conn.aclose()
    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    console.print(f"[dim]total wall time {report['wall_s']} s")
    return report


async def competitors(
    conn: aioredis.Redis, url: str, a: argparse.Namespace, ref: float, ours: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    if a.no_competitors:
        console.print("4. Competitors: skipped (--no-competitors)")
        return []
    if a.install_competitors:
        install_competitors()
        importlib.invalidate_caches()
    rows: list[dict[str, Any]] = []
    n = min(a.jobs, a.competitor_jobs)
    for lib, fn in (("saq", saq_lifecycle), ("arq", arq_lifecycle)):
        if importlib.util.find_spec(lib) is None:
            hint = "uv pip install saq" if lib == "saq" else "uv pip install --no-deps arq"
            console.print(f"4. {lib}: skipped: {hint}")
            continue
        for procs in a.competitor_procs:
            try:
                rows.append(
                    await fn(
                        conn, url, procs=procs, n=n, concurrency=a.concurrency, fsync=a.appendfsync
                    )
                )
            except Exception as e:  # noqa: BLE001 - a competitor's failure must not lose ours
                console.print(f"[yellow]4. {lib} x{procs} failed: {type(e).__name__}: {e}")
                break
    if rows:
        mine = [r for r in ours if r["appendfsync"] == a.appendfsync]
        print_lifecycle(
            mine + rows, ref, f"4. Side by side on the same Valkey (appendfsync {a.appendfsync})"
        )
        best: dict[int, float] = {}
        for r in rows:
            best[r["procs"]] = max(best.get(r["procs"], 0.0), r["jobs_per_s"])
        for procs, theirs in sorted(best.items()):
            lanes = [r["jobs_per_s"] for r in mine if r["procs"] == procs]
            if lanes:
                console.print(
                    f"  x{procs} processes: echomq {fmt(min(lanes))}-{fmt(max(lanes))} jobs/s vs "
                    f"fastest competitor {fmt(theirs)} jobs/s -> "
                    f"[bold]{min(lanes) / theirs:.1f}x-{max(lanes) / theirs:.1f}x"
                )
    return rows


def print_commands(rows: list[dict[str, Any]]) -> None:
    """Commands run inside the scripts per job, by command, for enqueue and for drain
    (claim + complete, with the consumers' heartbeats and reaps), one column per run."""
    runs = [r for r in rows if r["procs"] == min(x["procs"] for x in rows)]
    cols: list[tuple[str, dict[str, float], float]] = []
    for r in runs:
        name = f"{r['source']} {r['appendfsync']}"
        cols.append(
            (f"enqueue {name}", r["enqueue_inside_per_job"], r["enqueue_inside_total_per_job"])
        )
        cols.append((f"drain {name}", r["inside_per_job"], r["inside_total_per_job"]))
    names = sorted(
        {k for _, d, _ in cols for k in d}, key=lambda k: -max(d.get(k, 0) for _, d, _ in cols)
    )
    t = Table(
        title=f"2b. Commands per job inside the scripts (INFO commandstats, x{runs[0]['procs']} procs)"
    )
    t.add_column("command")
    for label, _, _ in cols:
        t.add_column(label, justify="right")
    t.add_row("[bold]all", *(f"[bold]{total:.2f}" for _, _, total in cols))
    for k in names:
        t.add_row(k, *(f"{d[k]:.2f}" if d.get(k) else "" for _, d, _ in cols))
    console.print(t)
    console.print(
        "  [dim]per job: every command the server ran during the enqueue or the drain, the "
        "EVALSHA calls themselves and INFO left out, the parent's progress polls subtracted."
    )


def explain_ratio(rows: list[dict[str, Any]], c: dict[str, Any], batch: int) -> None:
    ref, trivial_us = float(c["reference"]), float(c["server_us_per_trivial_call"])
    spj = [r["script_calls_per_job"] for r in rows]
    spj_text = f"{min(spj):.2f}" if min(spj) == max(spj) else f"{min(spj):.2f}-{max(spj):.2f}"
    cmds = [r["server_cmds_per_job"] for r in rows]
    us = [r["server_us_per_job"] for r in rows]
    best = max(rows, key=lambda r: r["jobs_per_s"])
    console.print(
        f"  ratio = jobs/s ÷ the trivial-EVALSHA ceiling ({fmt(ref)}/s). Draining costs "
        f"{spj_text} client-sent script calls per job (claims and completions each batched, "
        f"up to {batch} jobs a call, + heartbeats/extends/reaps) and enqueueing 1 more, so "
        "with scripts as cheap as `return 1` the whole lifecycle could reach ~1.0.\n"
        f"  They are not that cheap: a job runs {min(cmds):.0f}-{max(cmds):.0f} commands inside "
        f"its scripts and costs {min(us):.0f}-{max(us):.0f} µs of Valkey CPU, i.e. "
        f"{min(us) / trivial_us:.0f}-{max(us) / trivial_us:.0f} trivial calls' worth, so "
        f"Valkey's one thread alone would saturate near {fmt(1e6 / max(us))}-{fmt(1e6 / min(us))}"
        f" jobs/s ({1e6 / max(us) / ref:.3f}-{1e6 / min(us) / ref:.3f} of the ceiling). "
        f"Best here: {fmt(best['jobs_per_s'])} jobs/s ({best['source']} x{best['procs']}, "
        f"{best['appendfsync']}); the rest of the gap is consumer CPU "
        f"({best['worker_us_per_job']:.0f} µs/job in Python) sharing "
        f'{machine_cores()} cores with Valkey and anything else running ("other CPU").'
    )


def print_machine(m: dict[str, Any], server: Any) -> None:
    t = Table(title="EchoMQ benchmark", show_header=False)
    t.add_column("k")
    t.add_column("v")
    t.add_row("CPU", f"{m['cpu']} ({m['cores']} cores)")
    t.add_row("RAM", f"{m['ram_gib']} GiB")
    t.add_row("kernel", m["kernel"])
    t.add_row(
        "Python",
        f"{m['python']} (redis-py {m['redis_py']}, hiredis {m['hiredis']}, orjson {m['orjson']})",
    )
    t.add_row(
        "load average",
        f"{m['loadavg_1m']:.2f} at start (other programs' CPU use skews "
        'every figure; see the "other CPU" column)',
    )
    t.add_row("Valkey", f"{m['valkey']} ({server.url}, appendfsync {server.appendfsync}, AOF on)")
    console.print(t)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_echomq",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per lifecycle run (20000)")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="everysec")
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    p.add_argument(
        "--procs",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 2, 4],
        help="consumer process counts (1,2,4)",
    )
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument(
        "--prefetch",
        type=int,
        default=0,
        help="jobs each consumer leases ahead of its free slots (0, the default)",
    )
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--memory-jobs", type=int, default=100_000)
    p.add_argument(
        "--memory-only", action="store_true", help="measure section 3's memory alone, then stop"
    )
    p.add_argument(
        "--no-also-always",
        dest="also_always",
        action="store_false",
        help="skip the appendfsync always repeat",
    )
    p.add_argument("--latency-rate", type=float, default=500.0, help="jobs/s (500)")
    p.add_argument(
        "--latency-seconds", type=float, default=10.0, help="seconds at that rate (10; 0: skip)"
    )
    p.add_argument("--competitor-jobs", type=int, default=5_000)
    p.add_argument(
        "--competitor-procs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4]
    )
    p.add_argument("--no-competitors", action="store_true")
    p.add_argument(
        "--install-competitors",
        action="store_true",
        help="uv pip install saq and arq (--no-deps) into this venv first",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    try:
        report = asyncio.run(run(a))
    except KeyboardInterrupt:
        console.print("[red]interrupted: workers and server stopped")
        return 130
    if a.json:
        with open(a.json, "wb") as f:
            f.write(orjson.dumps(report, option=orjson.OPT_INDENT_2))
        console.print(f"figures written to {a.json}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
