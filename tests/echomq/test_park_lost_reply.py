"""A park whose reply is lost at the TCP level (echomq.consumer.park): the BLPOP and the claim behind
it ran on the server, the connection died before their answer came back. The consumer
must ask again under the same claim id, and nothing below it may re-send the pair: a
re-sent BLPOP blocks (its wake token is spent) while the job the first claim leased waits
unrun and unrenewed for the reaper."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio

import echomq
from tests.echomq.reply_proxy import ReplyDropper
from tests.echomq.test_consumer import wait_for

LEASE_MS = 4_000


async def test_a_woken_job_whose_park_reply_is_lost_runs_once_with_no_stall(
    q: echomq.Queue, valkey_url: str
) -> None:
    parts = urlsplit(valkey_url)
    proxy = await ReplyDropper(parts.hostname or "127.0.0.1", int(parts.port or 6379)).start()
    # redis-py's constructor defaults: 10 retries on a lost reply, which the park's own
    # connection copies its settings from.
    via = redis.asyncio.Redis(host="127.0.0.1", port=proxy.listen_port)
    ran: Counter[str] = Counter()

    async def handler(claim: echomq.Claim) -> Any:
        ran[claim.job_id] += 1

    consumer = echomq.Consumer(
        echomq.Queue(via, q.name),
        handler,
        lease_ms=LEASE_MS,
        heartbeat_ms=100,
        reap_interval_ms=100,
    )
    # The park's BLPOP on the wake key (the scheduler blocks on a key of its own): its
    # reply, with the claim's, is lost.
    wake = q.keys.wake.encode()
    proxy.arm.marker = b"BLPOP\r\n$%d\r\n%s\r\n" % (len(wake), wake)
    task = asyncio.create_task(consumer.run())
    try:

        async def parked() -> bool:
            return proxy.arm.seen == 1

        await wait_for(parked)
        jid = await q.lanes.enqueue("L", "x")  # wakes the park; the server runs the claim

        async def done() -> bool:
            info = await q.jobs.get(jid)
            return info is not None and info.state == "completed"

        await wait_for(done, timeout=20)
        assert proxy.arm.dropped == 1
        info = await q.jobs.get(jid)
        assert info is not None
        # The re-ask under the claim id answered the leased job: one delivery, no reap.
        assert (info.attempts, info.stalls) == (1, 0)
        assert ran == {jid: 1} and consumer.counts.released == 0
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 20)
        await via.aclose()
        await proxy.stop()
