"""The claim behind the park (echomq.consumer.park): an idle consumer's next claim is pipelined
behind its BLPOP, so Valkey runs it the moment a wake token arrives. What the consumer
does with it: takes its answer, and when the answer is lost, asks again under the same
claim id (which answers what the first run leased) or, stopping, hands those jobs back."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import echomq
from echomq.consumer.park import Woken
from echomq.jobs import decode_batch
from tests.echomq.test_consumer import Runner, completed, start_consumer, wait_for

_ = start_consumer  # the fixture, shared with test_consumer


def _wrap_park(c: echomq.Consumer, after: Callable[[Woken], Woken]) -> None:
    """Run ``after(woken)`` on what each of ``c``'s parks returns (a fault injected where
    the answer reaches the client: the server ran the claim for real)."""
    real = c._park.wait

    async def wait(timeout_ms: int, kick: asyncio.Event, claim: Any = None) -> Woken:
        return after(await real(timeout_ms, kick, claim))

    c._park.wait = wait  # type: ignore[method-assign]


async def test_a_woken_consumer_claims_behind_its_park_not_after_it(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    async def handler(claim: echomq.Claim) -> Any:
        return claim.payload

    c = await start_consumer(handler, concurrency=4)
    sent: list[int] = []
    real_claim = c._claim

    def claim(count: int, claim_id: str | None = None) -> Any:
        sent.append(count)
        return real_claim(count, claim_id)

    c._claim = claim  # type: ignore[method-assign]
    await asyncio.sleep(0.3)  # the first claim found nothing: parked, a claim behind it
    before = len(sent)
    for i in range(5):
        await q.lanes.enqueue(f"L{i}", i)
        await asyncio.sleep(0.05)  # each job wakes a parked consumer
    await wait_for(lambda: completed(q, 5))
    assert len(sent) == before  # every one of the five came in the claim behind a park


async def test_a_claim_whose_answer_was_lost_is_asked_again_under_its_id(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    ran: Counter[str] = Counter()

    async def handler(claim: echomq.Claim) -> Any:
        ran[claim.job_id] += 1

    c = await start_consumer(handler, concurrency=4)
    lost: list[str] = []

    def lose_the_first_answer(woken: Woken) -> Woken:
        if woken.reply is not None and not lost:
            claims = decode_batch(woken.reply).claims
            if claims:  # leased on the server; the consumer never hears of it
                lost.extend(cl.job_id for cl in claims)
                return Woken(lost=True)
        return woken

    _wrap_park(c, lose_the_first_answer)
    await asyncio.sleep(0.3)
    jobs = [await q.lanes.enqueue("L", i) for i in range(3)]
    await wait_for(lambda: completed(q, 3))
    assert lost and set(lost) <= set(jobs)
    assert ran == dict.fromkeys(jobs, 1)  # each once: the re-ask answered the leased jobs
    assert c.counts.released == 0  # nothing had to be handed back
    for jid in jobs:
        info = await q.jobs.get(jid)
        assert info is not None and info.state == "completed"
        assert info.attempts == 1 and info.stalls == 0


async def test_stopping_with_a_claim_in_doubt_hands_its_jobs_back(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    ran: list[str] = []

    async def handler(claim: echomq.Claim) -> Any:
        ran.append(claim.job_id)

    c = await start_consumer(handler, concurrency=4)

    def stop_as_the_answer_is_lost(woken: Woken) -> Woken:
        if woken.reply is not None and decode_batch(woken.reply).claims:
            c.stop()
            return Woken(lost=True)
        return woken

    _wrap_park(c, stop_as_the_answer_is_lost)
    await asyncio.sleep(0.3)
    jid = await q.lanes.enqueue("L", "x")

    async def handed_back() -> bool:
        info = await q.jobs.get(jid)
        return info is not None and info.state == "pending"

    await wait_for(handed_back)
    assert ran == [] and c.counts.released == 1
    info = await q.jobs.get(jid)
    assert info is not None and info.stalls == 0 and info.failures == 0
    assert await q.conn.scard(q.keys.worker_jobs(c.worker_id)) == 0
