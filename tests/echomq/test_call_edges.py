"""Edges of the client's fenced calls that the transition tests did not reach.

Found by mutation testing (tools/mutation/run.py, group ``echomq``): ``claim`` leasing more
than the one job it returns, the shortest lease ``extend`` accepts, ``extend_many``'s
per-job answers and ``reap``'s limit all survived a change.
"""

from __future__ import annotations

import asyncio

import pytest

import echomq
from tests.echomq.conftest import locations

LEASE = 60_000


async def test_claim_leases_exactly_the_one_job_it_returns(q: echomq.Queue) -> None:
    first, second = await q.jobs.enqueue("a"), await q.jobs.enqueue("b")
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == first
    assert await locations(q, second) == ["pending"]  # not leased to anyone, unreturned
    assert await q.conn.zcard(q.keys.active) == 1


async def test_extend_accepts_a_one_millisecond_lease(q: echomq.Queue) -> None:
    await q.jobs.enqueue("x")
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    before = await q.server_time_ms()
    assert await q.jobs.extend(c.job_id, c.token, 1)
    deadline = await q.conn.zscore(q.keys.active, c.job_id)
    assert deadline is not None and before + 1 <= deadline <= await q.server_time_ms() + 1


async def test_extend_many_answers_per_job_current_and_stale(q: echomq.Queue) -> None:
    await q.jobs.enqueue("a")
    await q.jobs.enqueue("b")
    batch = await q.jobs.claim_many("w", LEASE, 2)
    a, b = batch.claims
    assert await q.jobs.extend_many([(a.job_id, a.token), (b.job_id, b.token + 1)], LEASE) == [
        True,
        False,
    ]
    assert await q.jobs.extend_many([], LEASE) == []


async def test_reap_moves_at_most_its_limit_a_call_one_hundred_by_default(
    q: echomq.Queue,
) -> None:
    for i in range(102):
        await q.jobs.enqueue(i)
    assert len((await q.jobs.claim_many("w", 1, 102)).claims) == 102
    await asyncio.sleep(0.02)  # every 1 ms lease has run out
    assert len(await q.stalled.reap(limit=1)) == 1
    assert len(await q.stalled.reap()) == 100
    assert len(await q.stalled.reap()) == 1
    assert await q.stalled.reap() == []


async def test_a_claim_of_zero_jobs_is_refused_before_anything_is_sent(q: echomq.Queue) -> None:
    await q.jobs.enqueue("x")
    with pytest.raises(ValueError):
        await q.jobs.claim_many("w", LEASE, 0)
    with pytest.raises(ValueError):
        await q.lanes.claim_many("w", LEASE, 0)
    assert len((await q.jobs.claim_many("w", LEASE, 1)).claims) == 1


async def test_a_claim_reports_the_next_due_time_or_none(q: echomq.Queue) -> None:
    assert (await q.jobs.claim_many("w", LEASE, 1)).next_due_ms is None  # nothing scheduled
    jid = await q.jobs.enqueue("later", delay_ms=60_000)
    due = await q.conn.zscore(q.keys.scheduled, jid)
    assert (await q.jobs.claim_many("w", LEASE, 1)).next_due_ms == due
