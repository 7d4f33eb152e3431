"""A consumer in its own process, for tests that SIGKILL or SIGTERM it.

    python -m tests.echomq.proc_worker URL QUEUE LOGFILE MODE [lease_ms] [lapse_ms]

MODE ``hang``: the handler logs "start <job> <token>" and never returns.
MODE ``slow``: the handler logs, sleeps 1 s, logs "done <job>" and returns.
"""

from __future__ import annotations

import asyncio
import sys

import redis.asyncio

import echomq


def note(logfile: str, line: str) -> None:
    with open(logfile, "a") as f:
        f.write(line + "\n")


async def main() -> None:
    url, queue, logfile, mode = sys.argv[1:5]
    lease_ms = int(sys.argv[5]) if len(sys.argv) > 5 else 10_000
    lapse_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 3_000
    conn = redis.asyncio.Redis.from_url(url)
    q = echomq.Queue(conn, queue)

    async def handler(claim: echomq.Claim) -> dict[str, str]:
        note(logfile, f"start {claim.job_id} {claim.token}")
        if mode == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(1.0)
        note(logfile, f"done {claim.job_id}")
        return {"by": "proc"}

    consumer = echomq.Consumer(
        q,
        handler,
        lease_ms=lease_ms,
        lapse_ms=lapse_ms,
        heartbeat_ms=100,
        reaper=False,
        grace_ms=5_000,
    )
    note(logfile, "ready")
    await consumer.run(install_signal_handlers=True)
    note(
        logfile,
        f"stopped completed={consumer.counts.completed} released={consumer.counts.released}",
    )
    await conn.aclose()


if __name__ == "__main__":
    asyncio.run(main())
