"""An idle consumer in its own process, with production defaults, until SIGTERM.

python -m tests.echomq.proc_idle URL QUEUE
"""

from __future__ import annotations

import asyncio
import sys

import redis.asyncio

import echomq


async def main() -> None:
    url, queue = sys.argv[1:3]
    conn = redis.asyncio.Redis.from_url(url)

    async def handler(claim: echomq.Claim) -> None:
        return None

    consumer = echomq.Consumer(echomq.Queue(conn, queue), handler)
    print("ready", flush=True)
    await consumer.run(install_signal_handlers=True)
    await conn.aclose()


if __name__ == "__main__":
    asyncio.run(main())
