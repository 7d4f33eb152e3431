"""What the slot fence costs Valkey: CPU per job with and without it. Prints figures.

    uv run python -m bench.bench_fence [--jobs 5000] [--repeat 6]

Every EchoMQ script declares ``emq:{q}:~fence``, a key never written, so a slot under live
migration refuses every script (``echomq.keys.Keys.fence``). This measures what one more
declared key costs on the server: a lifecycle (enqueue over 50 lanes, claim in batches of
32, complete) of ``--jobs`` jobs on one embedded Valkey, with the fence and with the
runner's fence switched off, interleaved ``--repeat`` times; Valkey's CPU from ``INFO cpu``
(user + sys) per job. Medians, and their ratio, from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

import redis.asyncio
from rich.progress import Progress

import echomq
from echomq.server import EmbeddedValkey

LANES = 50
WAVE = 50  # jobs in flight at once: under the client's connection pool


async def lifecycle(conn: Any, name: str, jobs: int, fence: bool) -> None:
    q = echomq.Queue(conn, name)
    if not fence:
        q.runner.fence = None
    for start in range(0, jobs, WAVE):
        end = min(jobs, start + WAVE)
        await asyncio.gather(*(q.lanes.enqueue(f"l{i % LANES}", i) for i in range(start, end)))
    done = 0
    while done < jobs:
        batch = await q.lanes.claim_many("WRK_bench", 60_000, 32)
        await asyncio.gather(*(q.jobs.complete(c.job_id, c.token, 1) for c in batch.claims))
        done += len(batch.claims)


async def server_cpu_s(conn: Any) -> float:
    info = await conn.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def measure(
    url: str, jobs: int, repeat: int, progress: bool = True
) -> dict[bool, list[float]]:
    """Valkey CPU µs per job, by fence on/off, one figure per repetition."""
    conn = redis.asyncio.Redis.from_url(url)
    out: dict[bool, list[float]] = {False: [], True: []}
    try:
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task("lifecycles", total=2 * repeat)
            for r in range(repeat):
                for fence in (False, True):
                    before = await server_cpu_s(conn)
                    await lifecycle(conn, f"fence{r}{int(fence)}", jobs, fence)
                    out[fence].append((await server_cpu_s(conn) - before) / jobs * 1e6)
                    bar.advance(task)
    finally:
        await conn.aclose()
    return out


def report(figures: dict[bool, list[float]]) -> str:
    off, on = statistics.median(figures[False]), statistics.median(figures[True])
    lines = [
        f"without fence: {[round(x, 1) for x in figures[False]]} µs/job, median {off:.1f}",
        f"with fence:    {[round(x, 1) for x in figures[True]]} µs/job, median {on:.1f}",
        f"ratio with ÷ without: {on / off:.3f}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedValkey(Path(tmp), appendfsync="everysec") as server,
    ):
        figures = asyncio.run(measure(server.url, args.jobs, args.repeat))
    print(f"{args.jobs} jobs per lifecycle, {args.repeat} interleaved repetitions each")
    print(report(figures))


if __name__ == "__main__":
    main()
