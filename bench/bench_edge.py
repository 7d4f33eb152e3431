"""The library's edge, measured: what hooks cost a consumer, and the events tail beside the
hub's former XREAD loop. Prints figures; it is not a test.

    uv run python -m bench.bench_edge [--jobs N] [--events N] [--rounds R] [--only hooks|tail]

Starts its own ``valkey-server`` (AOF ``everysec``) in a temp dir.

1. **Hooks.** One in-process ``Consumer`` (concurrency 32, batch 32) drains N plain jobs;
   the clock runs from its start to the moment it has completed them all. Modes: no hooks,
   one empty ``Hooks()``, and every hook point set (no-op ``on_claim``, ``after_extend``,
   ``on_fail``, ``on_release``, pass-through ``around_handler`` and ``around_complete``).
   Rounds interleave the modes; medians and ratios to "none". Run from an older checkout
   (``git worktree``) with ``--only hooks --modes none`` for the figure before hooks.
2. **Tail.** Two streams (a partition's and the rounds queue's, as the hub follows them)
   hold N events between them; each reader reads them all from ``0-0`` in reads of 500,
   decoding each entry into an ``Event`` and dispatching it on its queue: the hub's loop as
   it was before ``Tail`` (copied below) and ``Tail.batches()``. Events/s and this
   process's CPU per event (the hub's cost), medians of rounds that alternate which goes
   first, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

import echomq
from bench.common import embedded_server

HOOKS = hasattr(echomq, "Hooks")


def _hooks(mode: str) -> list[Any]:
    if mode == "none":
        return []
    if mode == "empty":
        return [echomq.Hooks()]

    async def around_handler(claim: echomq.Claim, call_next: Any) -> Any:
        return await call_next(claim)

    async def around_complete(items: Any, send: Any) -> list[bool]:
        verdicts: list[bool] = await send(items)
        return verdicts

    def nothing(*_: Any) -> None:
        return None

    return [
        echomq.Hooks(
            around_handler=around_handler,
            on_claim=nothing,
            around_complete=around_complete,
            on_fail=nothing,
            on_release=nothing,
            after_extend=nothing,
        )
    ]


async def drain(url: str, mode: str, jobs: int) -> tuple[float, float]:
    """(jobs/s, this process's CPU us per job) for one consumer draining ``jobs`` plain
    jobs under ``mode``'s hooks."""
    conn = aioredis.Redis.from_url(url)
    q = echomq.Queue(conn, f"h{os.urandom(4).hex()}")
    pipe_size = 50  # at once: the pool holds 100 connections
    for start in range(0, jobs, pipe_size):
        await asyncio.gather(*(q.jobs.enqueue(i) for i in range(start, start + pipe_size)))

    async def handler(claim: echomq.Claim) -> None:
        return None

    kw: dict[str, Any] = {"hooks": _hooks(mode)} if HOOKS else {}
    c = echomq.Consumer(q, handler, source="jobs", concurrency=32, batch=32, reaper=False, **kw)
    t0, c0 = time.perf_counter(), time.process_time()
    task = asyncio.create_task(c.run())
    while c.completed < jobs:
        await asyncio.sleep(0.005)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    c.stop()
    await task
    await conn.aclose()
    return jobs / elapsed, cpu / jobs * 1e6


# -- the hub's reader before Tail (web/hub.py at 43d1df7), minus its error handling ----------


def _streams(reply: Any) -> list[tuple[Any, list[Any]]]:
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(stream, value[0]) for stream, value in reply.items()]
    return [(stream, entries) for stream, entries in reply]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def read_old(reader: Any, guesses: set[str], streams: Sequence[str], n: int) -> int:
    positions: dict[Any, Any] = dict.fromkeys(streams, "0-0")
    seen = rounds = 0
    while seen < n:
        reply = await reader.xread(positions, count=500, block=1_000)
        for raw_stream, entries in _streams(reply):
            stream = _text(raw_stream)
            for raw_id, fields in entries:
                event = echomq.Event.from_entry(raw_id, fields)
                positions[stream] = event.event_id
                seen += 1
                if stream not in guesses:
                    rounds += 1
    return rounds


async def read_tail(reader: Any, guesses: set[str], queues: Sequence[echomq.Queue], n: int) -> int:
    from echomq.events import Tail

    tail = Tail(queues, conn=reader, after="0-0", block_ms=1_000, count=500)
    seen = rounds = 0
    async for batch in tail.batches():
        for queue, _event in batch:
            seen += 1
            if queue.name not in guesses:
                rounds += 1
        if seen >= n:
            break
    return rounds


async def fill(conn: Any, q: echomq.Queue, n: int) -> None:
    """``n`` completed events, each with a guess-sized result, as the complete script adds."""
    result = b'{"player_id":"PLR_01J","round_id":"RND_01J","seq":3,"exact":2,"near":1}'
    key = q.keys.events
    for start in range(0, n, 1_000):
        pipe = conn.pipeline(transaction=False)
        for i in range(start, min(n, start + 1_000)):
            pipe.xadd(key, {"type": "completed", "job_id": f"JOB_{i:026d}", "result": result})
        await pipe.execute()


async def tail_rounds(url: str, events: int, rounds: int, protocol: int) -> dict[str, Any]:
    conn = aioredis.Redis.from_url(url)
    tag = os.urandom(3).hex()
    guesses, rounds_q = echomq.Queue(conn, f"guesses-{tag}"), echomq.Queue(conn, f"rounds-{tag}")
    await fill(conn, guesses, events - events // 100)
    await fill(conn, rounds_q, events // 100)
    reader = aioredis.Redis.from_url(url, protocol=protocol)
    names = {guesses.name}
    keys = [q.keys.events for q in (guesses, rounds_q)]
    rate: dict[str, list[float]] = {"old": [], "tail": []}
    cpu: dict[str, list[float]] = {"old": [], "tail": []}  # this process's CPU, us/event
    for i in range(rounds):
        for which in ("old", "tail") if i % 2 else ("tail", "old"):  # neither always first
            t0, c0 = time.perf_counter(), time.process_time()
            if which == "old":
                got = await read_old(reader, {keys[0]}, keys, events)
            else:
                got = await read_tail(reader, names, [guesses, rounds_q], events)
            rate[which].append(events / (time.perf_counter() - t0))
            cpu[which].append((time.process_time() - c0) / events * 1e6)
            assert got == events // 100, (which, got)
    await reader.aclose()
    await conn.aclose()
    return {
        **{k: statistics.median(v) for k, v in rate.items()},
        **{f"{k}_cpu": statistics.median(v) for k, v in cpu.items()},
        **{f"{k}_cpu_min": min(v) for k, v in cpu.items()},
    }


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=("hooks", "tail"))
    p.add_argument("--modes", default="none,empty,all")
    a = p.parse_args()
    with embedded_server("everysec") as server:
        if a.only != "tail":
            modes = a.modes.split(",") if HOOKS else ["none"]
            rates: dict[str, list[float]] = {m: [] for m in modes}
            cpus: dict[str, list[float]] = {m: [] for m in modes}
            print(f"hooks: {a.jobs} jobs per drain, {a.rounds} rounds; {load()}")
            for i in range(a.rounds):
                for m in modes[i % len(modes) :] + modes[: i % len(modes)]:  # rotate the order
                    rate, cpu = await drain(server.url, m, a.jobs)
                    rates[m].append(rate)
                    cpus[m].append(cpu)
            base = statistics.median(rates[modes[0]])
            base_cpu = statistics.median(cpus[modes[0]])
            for m in modes:
                med, cpu = statistics.median(rates[m]), statistics.median(cpus[m])
                print(
                    f"  {m:6} {med:9,.0f} jobs/s  ratio {med / base:.3f}   consumer CPU"
                    f" {cpu:6.1f} us/job  ratio {cpu / base_cpu:.3f}"
                    f"  (rounds: {', '.join(f'{r:,.0f}' for r in rates[m])})"
                )
            print(f"  {load()}")
        if a.only != "hooks":
            for protocol in (2, 3):
                print(f"tail: {a.events} events, 2 streams, RESP{protocol}; {load()}")
                r = await tail_rounds(server.url, a.events, a.rounds, protocol)
                print(
                    f"  old loop {r['old']:9,.0f} events/s   Tail {r['tail']:9,.0f} events/s"
                    f"   ratio {r['tail'] / r['old']:.3f}   {load()}"
                )
                print(
                    f"  CPU per event (median, min): old loop {r['old_cpu']:.2f}, "
                    f"{r['old_cpu_min']:.2f} us   Tail {r['tail_cpu']:.2f}, {r['tail_cpu_min']:.2f} us"
                    f"   ratio of medians {r['tail_cpu'] / r['old_cpu']:.3f}"
                )


if __name__ == "__main__":
    asyncio.run(main())
