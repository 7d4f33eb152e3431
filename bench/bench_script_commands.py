"""Commands run inside the scripts per lane job: prints figures, it is not a test.

    uv run python -m bench.bench_script_commands [--jobs N] [--lanes L ...]

A fresh embedded ``valkey-server``; for each lane count, N guesses submitted one by one as
the game does (``Lanes.submit`` with a pending cap and a sequence number, a lane per
player), then drained by ``claim_many(32)`` + ``complete_many``; the commands Valkey ran
(``INFO commandstats``, every command but the script calls themselves) divided by N, for
the enqueue and for the drain apart.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import redis.asyncio as aioredis

from bench.common import embedded_server
from echomq import Queue

NOT_COUNTED = {"evalsha", "eval", "info", "config|resetstat"}


async def inside(conn: Any) -> int:
    stats = await conn.info("commandstats")
    return sum(
        int(v["calls"]) for k, v in stats.items() if k.removeprefix("cmdstat_") not in NOT_COUNTED
    )


async def measure(conn: Any, jobs: int, lanes: int) -> tuple[float, float]:
    q = Queue(conn, f"cmds-{lanes}")
    await conn.config_resetstat()
    for i in range(jobs):
        lane = f"PLR_{i % lanes:026d}"
        payload = {"round_id": "RND_x", "guess": ["a"] * 4}
        await q.lanes.submit(lane, payload, max_pending=100, seq_scope="RND_x")
    enqueue = await inside(conn)
    await conn.config_resetstat()
    done = 0
    while done < jobs:
        batch = await q.lanes.claim_many("w", 60_000, 32)
        await q.jobs.complete_many([(c.job_id, c.token, None) for c in batch.claims])
        done += len(batch.claims)
    return enqueue / jobs, await inside(conn) / jobs


async def run(a: argparse.Namespace) -> None:
    with embedded_server("no") as server:
        conn = aioredis.from_url(server.url)
        try:
            for lanes in a.lanes:
                enqueue, drain = await measure(conn, a.jobs, lanes)
                print(
                    f"{lanes} lanes, {a.jobs} jobs: per job {enqueue:.2f} (enqueue) {drain:.2f} (drain)"
                )
        finally:
            await conn.aclose()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_script_commands", description=__doc__)
    p.add_argument("--jobs", type=int, default=4_000)
    p.add_argument("--lanes", type=int, nargs="+", default=[100, 2_000])
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
