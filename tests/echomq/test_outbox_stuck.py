"""One completion the server refuses every time (echomq.consumer.outbox): the others must still go
through, and the stuck one be given up within a lease of its first error, however often
the lease keeper renews its lease meanwhile.

The refusal is an ``OOM`` error answered, for every completion call naming that one job,
by a TCP proxy in front of the session's Valkey (the call never reaches the server);
claims, renewals and the other completions pass through it untouched."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import echomq
from echomq.scripts import SCRIPTS
from tests.echomq.reply_proxy import ReplyDropper
from tests.echomq.test_consumer import wait_for

LEASE_MS = 3_000


async def test_a_completion_refused_every_time_holds_no_other_back(
    q: echomq.Queue, valkey_url: str
) -> None:
    parts = urlsplit(valkey_url)
    proxy = await ReplyDropper(parts.hostname or "127.0.0.1", int(parts.port or 6379)).start()
    via = echomq.connect(f"redis://127.0.0.1:{proxy.listen_port}")
    complete = SCRIPTS["complete"]
    await q.conn.script_load(complete.source)  # completions go as EVALSHA, naming the script
    bad = await q.lanes.enqueue("bad", "bad")
    others = [await q.lanes.enqueue(f"L{i}", i) for i in range(10)]
    proxy.arm.refuse = (complete.sha.encode(), bad.encode())

    async def handler(claim: echomq.Claim) -> Any:
        return claim.payload

    consumer = echomq.Consumer(
        echomq.Queue(via, q.name),
        handler,
        lease_ms=LEASE_MS,
        concurrency=4,
        heartbeat_ms=100,
        reap_interval_ms=100,
    )
    task = asyncio.create_task(consumer.run())
    try:

        async def others_done() -> bool:
            infos = [await q.jobs.get(j) for j in others]
            return all(i is not None and i.state == "completed" for i in infos)

        await wait_for(others_done)
        assert proxy.arm.refused >= 1
        stats = await q.stats()
        assert stats["counters"].get("reaped", 0) == 0
        for jid in others:
            info = await q.jobs.get(jid)
            assert info is not None and (info.attempts, info.stalls) == (1, 0)

        async def given_up() -> bool:
            return consumer.counts.stale == 1

        # Its lease renewed all along, yet given up a lease after its first error.
        await wait_for(given_up, timeout=3 * LEASE_MS / 1000)
        info = await q.jobs.get(bad)
        assert info is not None and info.state == "active" and info.attempts == 1
        assert consumer.counts.completed == 10
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 20)
        await via.aclose()
        await proxy.stop()
