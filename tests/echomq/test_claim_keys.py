"""The claim tracker's key (echomq.consumer.claims): a job held twice under the same ``attempts``
with two lease ids, as after data loss, is two claims, never one record overwriting the
other."""

from __future__ import annotations

import asyncio
from typing import Any

import echomq
from echomq.consumer.claims import READY, ClaimTracker, key_of
from echomq.types import Claim, Token
from tests.echomq.test_consumer import wait_for


def _claim(job_id: str, attempts: int, lease: str) -> Claim:
    return Claim(job_id, "lane", {}, Token(attempts, lease), 0)


def test_the_same_attempts_under_another_lease_is_another_claim() -> None:
    t = ClaimTracker()
    old, new = _claim("J", 1, "lease-a"), _claim("J", 1, "lease-b")
    assert old.token == new.token and hash(old.token) == hash(new.token)  # ints alike
    first, second = t.hold(old), t.hold(new)
    assert len(t) == 2 and first is not second
    assert t.get(key_of(old)) is first and t.get(key_of(new)) is second
    t.lose(key_of(old))
    t.forget(key_of(old))  # the old attempt unwinds: the new one is untouched
    assert t.get(key_of(new)) is second and second.state is READY


async def _dump(q: echomq.Queue) -> dict[bytes, tuple[int, bytes]]:
    saved: dict[bytes, tuple[int, bytes]] = {}
    async for key in q.conn.scan_iter(match=f"{q.keys.prefix}*"):
        ttl = await q.conn.pttl(key)
        saved[key] = (max(0, ttl), await q.conn.dump(key))
    return saved


async def _restore(q: echomq.Queue, saved: dict[bytes, tuple[int, bytes]]) -> None:
    """Put the queue back as ``saved`` left it, in one transaction: what a server that
    lost its last writes (an ``everysec`` crash) comes back with."""
    now = [key async for key in q.conn.scan_iter(match=f"{q.keys.prefix}*")]
    async with q.conn.pipeline(transaction=True) as pipe:
        if now:
            pipe.delete(*now)
        for key, (ttl, data) in saved.items():
            pipe.restore(key, ttl, data, replace=True)
        await pipe.execute()


async def test_a_job_leased_again_under_the_same_attempts_after_data_loss_runs(
    q: echomq.Queue,
) -> None:
    jid = await q.lanes.enqueue("L", "x")
    before_claim = await _dump(q)
    leases: list[str] = []
    first_may_end = asyncio.Event()

    async def handler(claim: echomq.Claim) -> Any:
        leases.append(claim.token.lease)
        if len(leases) == 1:
            await first_may_end.wait()  # the first holder, still running at the loss

    consumer = echomq.Consumer(
        q,
        handler,
        concurrency=1,
        prefetch=1,  # room to lease the job again while its first attempt runs
        lease_ms=3_000,
        heartbeat_ms=100,
        reap_interval_ms=100,
        park_max_ms=100,
    )
    task = asyncio.create_task(consumer.run())
    try:

        async def started() -> bool:
            return len(leases) == 1

        await wait_for(started)
        await _restore(q, before_claim)  # the claim is lost on the server

        async def leased_again() -> bool:
            return any(c.token.lease != leases[0] for c in consumer.in_flight)

        await wait_for(leased_again)
        again = next(c for c in consumer.in_flight if c.token.lease != leases[0])
        assert again.token == 1  # the same attempts number, another lease
        first_may_end.set()  # its completion is stale; the new lease's job must still run

        async def done() -> bool:
            info = await q.jobs.get(jid)
            return info is not None and info.state == "completed"

        await wait_for(done, timeout=15)
        info = await q.jobs.get(jid)
        assert info is not None and (info.attempts, info.stalls) == (1, 0)
        assert leases[1:] == [again.token.lease]  # the second lease ran, and only it
    finally:
        first_may_end.set()
        consumer.stop()
        await asyncio.wait_for(task, 20)
