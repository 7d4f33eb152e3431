"""Write latency at a steady rate, from processes of their own (``--latency-child``)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.progress import Progress

from bench.common import ROOT
from bench.store.backend import Guesses, seed
from codemojex.store import (
    GroupCommit,
    ScoreRecord,
    make_engine,
    migrate_async,
    record_scores,
)

# --- write latency: two processes writing through GroupCommit, open loop ---------------------


async def latency_child(url: str, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    """One writer process: ``rate`` guesses/s offered on a fixed schedule (open loop) to a
    GroupCommit; each write's latency runs from its scheduled time to its commit."""
    engine = make_engine(url)
    group = GroupCommit(engine)
    guesses = Guesses()
    guesses.n = int(tag) * 10**9  # JOB ids of their own
    records = guesses.make("RND_001", int(rate * seconds))
    latencies: list[float] = []
    loop = asyncio.get_running_loop()

    async def one(record: ScoreRecord, due: float) -> None:
        await group.write(record)
        latencies.append(loop.time() - due)

    try:
        await record_scores(engine, guesses.make("RND_000", 8))  # connect, prepare
        cpu0, start = time.process_time(), loop.time()
        tasks = []
        for i, record in enumerate(records):
            due = start + i / rate
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            tasks.append(asyncio.create_task(one(record, due)))
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu0
        await group.close()
    finally:
        await engine.dispose()
    latencies.sort()
    return {
        "n": len(latencies),
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[int(len(latencies) * 0.99)],
        "max": latencies[-1],
        "cpu_s": cpu,
        "batch": group.records / max(group.batches, 1),
    }


@dataclass
class Latency:
    backend: str
    rate: float
    children: list[dict[str, Any]]


async def latency(
    backend: str,
    url: str,
    rates: Sequence[float],
    procs: int,
    seconds: float,
    progress: Progress,
) -> list[Latency]:
    import json

    await migrate_async(url)
    engine = make_engine(url)
    try:
        await seed(engine, 2)
    finally:
        await engine.dispose()
    out = []
    task = progress.add_task(f"{backend} write latency", total=len(rates))
    for k, rate in enumerate(rates):
        children = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.bench_store", "--latency-child", url,
                str(rate / procs), str(seconds), str(k * procs + i + 1),
                cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            )
            for i in range(procs)
        ]  # fmt: skip
        results = [json.loads((await c.communicate())[0]) for c in children]
        out.append(Latency(backend, rate, results))
        progress.advance(task)
    return out
