"""A consumer process that runs a queue's schedules and kills itself mid-tick at random.

    python -m tests.chaos.proc_scheduler URL QUEUE LOGFILE CRASH_P

With probability CRASH_P per tick call it SIGKILLs itself: before sending the script,
or after sending it (the reply unread), so the kill lands on both sides of the tick.
The consumer claims from the plain queue; the schedule's jobs go to a lane nobody claims.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections.abc import Sequence
from typing import Any

import redis.asyncio

import echomq
from echomq.scripts import Call


def note(logfile: str, line: str) -> None:
    with open(logfile, "a") as f:
        f.write(line + "\n")


async def main() -> None:
    url, queue, logfile, crash_p = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    q = echomq.Queue(redis.asyncio.Redis.from_url(url), queue)
    rng = random.Random()
    run_each = q.runner.run_each

    async def crashing(calls: Sequence[Call]) -> list[Any]:
        # The scheduler sends a turn's ticks in one pipeline (Runner.run_many).
        if any(c[0].name == "schedule_tick" for c in calls) and rng.random() < crash_p:
            when = rng.choice(("before", "after"))
            note(logfile, f"kill {when}")
            if when == "after":
                sent = asyncio.ensure_future(run_each(calls))
                await asyncio.sleep(rng.uniform(0, 0.002))
                _ = sent
            os.kill(os.getpid(), signal.SIGKILL)
        return await run_each(calls)

    q.runner.run_each = crashing  # type: ignore[method-assign]

    async def handler(claim: echomq.Claim) -> None:
        return None

    consumer = echomq.Consumer(q, handler, source="jobs", reap_interval_ms=200)
    note(logfile, "ready")
    await consumer.run(install_signal_handlers=True)


if __name__ == "__main__":
    asyncio.run(main())
