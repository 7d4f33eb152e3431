"""One job whose handler always raises ``Unavailable`` is not an outage: it is failed after
``HAND_BACKS`` strikes (hand-backs while other jobs complete), never holds the consumers in
``waiting``, and is not the probe of the wait it began; a real outage strikes nobody."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import echomq
from echomq.consumer.outage import HAND_BACKS
from echomq.settings import Settings
from tests.echomq.test_consumer import running_consumers, wait_for

Start = Callable[..., Awaitable[echomq.Consumer]]


@pytest.fixture
async def fast(redis_conn: Any, queue_name: str) -> echomq.Queue:
    # Retries after 10 ms, so the poison's failures run their course within the test.
    return echomq.Queue(redis_conn, queue_name, settings=Settings(backoff_ms=10, jitter=0.0))


@pytest.fixture
async def start(fast: echomq.Queue) -> AsyncIterator[Start]:
    async with running_consumers(fast) as go:
        yield go


async def test_a_poison_job_is_failed_and_the_rest_drain(fast: echomq.Queue, start: Start) -> None:
    """Two consumers, 300 jobs and one whose handler always raises ``Unavailable``: all 300
    complete, the poison goes dead with its reason, claimed a bounded number of times, and
    neither consumer is left waiting."""
    poison = await fast.lanes.enqueue("bad", {"bad": True}, max_attempts=3)
    for i in range(300):
        await fast.lanes.enqueue(f"l{i % 30}", {"i": i})
    claims = 0

    async def handler(claim: echomq.Claim) -> None:
        nonlocal claims
        if claim.payload.get("bad"):
            claims += 1
            raise echomq.Unavailable("connection dropped")

    consumers = [await start(handler, concurrency=4) for _ in range(2)]

    async def settled() -> bool:
        info = await fast.jobs.get(poison)
        return (
            (await fast.stats())["completed"] == 300 and info is not None and info.state == "dead"
        )

    await wait_for(settled, 15)
    info = await fast.jobs.get(poison)
    assert info is not None and info.failures == 3 and info.reason == "failed 3 times"
    assert info.error is not None and "raised Unavailable" in info.error
    # Its strikes, then one claim per later delivery (each fails at once).
    assert claims <= HAND_BACKS + 1 + 2
    assert not any(c.waiting for c in consumers)


async def test_the_job_that_began_a_wait_is_not_its_probe(fast: echomq.Queue, start: Start) -> None:
    """While other jobs wait, a consumer's probe is one of them, never the job whose
    hand-back began the wait: its lane, empty again after each hand-back, is first in fair
    order every time, ahead of the other jobs' lane."""
    poison = await fast.lanes.enqueue("bad", {"bad": True}, max_attempts=1)
    for i in range(20):
        await fast.lanes.enqueue("k", {"i": i})
    calls: list[tuple[str, bool]] = []
    consumer: echomq.Consumer | None = None

    async def handler(claim: echomq.Claim) -> None:
        assert consumer is not None
        calls.append((claim.job_id, consumer.waiting))
        if claim.payload.get("bad"):
            raise echomq.Unavailable("connection dropped")

    consumer = await start(handler, batch=1)

    async def settled() -> bool:
        info = await fast.jobs.get(poison)
        return (await fast.stats())["completed"] == 20 and info is not None and info.state == "dead"

    await wait_for(settled, 10)
    assert (poison, True) not in calls
    assert sum(1 for job, _ in calls if job == poison) == HAND_BACKS + 1
    assert not consumer.waiting


async def test_hand_backs_strike_only_while_other_jobs_complete(q: echomq.Queue) -> None:
    """Script level: hand-backs with nothing completed in between (an outage) strike
    nobody however many; with a completion before each, the job is out of strikes at the
    bound and stays active under its token, for the caller to fail."""
    job = await q.lanes.enqueue("a", {"n": 1})
    for _ in range(3 * HAND_BACKS):
        c = await q.lanes.claim("w", 10_000)
        assert c is not None and c.job_id == job
        assert await q.jobs.hand_back(job, c.token, HAND_BACKS) == "released"
    for n in range(HAND_BACKS):
        other = await q.jobs.enqueue({"other": n})
        got = await q.jobs.claim("w", 10_000)
        assert got is not None and got.job_id == other
        assert await q.jobs.complete(other, got.token)
        c = await q.lanes.claim("w", 10_000)
        assert c is not None and c.job_id == job
        verdict = await q.jobs.hand_back(job, c.token, HAND_BACKS)
        assert verdict == ("exhausted" if n == HAND_BACKS - 1 else "released"), n
    info = await q.jobs.get(job)
    assert c is not None
    assert info is not None and info.state == "active" and info.attempts == c.token
    assert await q.jobs.fail(job, c.token, "gave up") == "scheduled"
    assert await q.jobs.hand_back(job, c.token, HAND_BACKS) == "stale"
