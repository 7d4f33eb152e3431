"""One bound for ``attempts`` on every side (``checks.MAX_TOKEN``): an enqueue refuses an
``attempts`` whose claim could not hand out ``attempts + 1`` as a token, a claim never
hands out a larger one, and a batch call judges each item's token on its own."""

from __future__ import annotations

import pytest

import echomq
from echomq.checks import MAX_TOKEN


async def test_an_enqueue_at_the_limit_is_refused_beside_normal_jobs(q: echomq.Queue) -> None:
    """Three normal jobs and one with ``attempts`` at the limit: that one is refused before
    anything is sent, the others complete under their tokens."""
    normal = [await q.jobs.enqueue({"n": i}) for i in range(3)]
    with pytest.raises(ValueError, match=f"attempts must be >= 0 and < {MAX_TOKEN}"):
        await q.jobs.enqueue({"big": 1}, attempts=MAX_TOKEN)
    with pytest.raises(ValueError, match="attempts"):
        await q.lanes.submit("a", {"big": 1}, attempts=MAX_TOKEN)
    stats = await q.stats()
    assert stats["pending"] == 3 and stats["counters"]["enqueued"] == 3
    batch = await q.jobs.claim_many("w", 10_000, 10)
    assert sorted(c.job_id for c in batch.claims) == sorted(normal)
    assert (
        await q.jobs.complete_many([(c.job_id, c.token, None) for c in batch.claims]) == [True] * 3
    )


async def test_the_last_token_is_handed_out_once(q: echomq.Queue) -> None:
    """``attempts = MAX_TOKEN - 1`` is taken: its claim's token is ``MAX_TOKEN``, which
    every fenced call accepts. A row at the limit is not leased again: it goes dead as
    malformed instead of carrying a token no call would accept."""
    job = await q.jobs.enqueue({"last": 1}, attempts=MAX_TOKEN - 1)
    c = await q.jobs.claim("w", 10_000)
    assert c is not None and c.job_id == job and c.token == MAX_TOKEN
    assert await q.jobs.extend(job, c.token, 10_000)
    assert await q.jobs.extend_many([(job, c.token)], 10_000) == [True]
    assert await q.jobs.release(job, c.token)
    assert await q.jobs.claim("w", 10_000) is None
    info = await q.jobs.get(job)
    assert info is not None and info.state == "dead" and info.reason == "malformed row"
    assert info.attempts == MAX_TOKEN


async def test_one_token_out_of_range_in_extend_many_leaves_the_others_renewed(
    q: echomq.Queue,
) -> None:
    """extend_many and complete_many: an item whose token no claim can hand out is stale
    (False, not sent); every other item of the call is renewed (completed) all the same."""
    for i in range(4):
        await q.jobs.enqueue({"n": i})
    batch = await q.jobs.claim_many("w", 1_000, 4)
    a, b, c, d = batch.claims
    before = {x.job_id: x.lease_until_ms for x in batch.claims}
    verdicts = await q.jobs.extend_many(
        [(a.job_id, a.token), (b.job_id, MAX_TOKEN + 1), (c.job_id, c.token)], 60_000
    )
    assert verdicts == [True, False, True]
    for x in (a, c):
        info = await q.jobs.get(x.job_id)
        assert info is not None and info.lease_until_ms is not None
        assert info.lease_until_ms > before[x.job_id] + 30_000
    info = await q.jobs.get(b.job_id)
    assert info is not None and info.lease_until_ms == before[b.job_id]
    done = await q.jobs.complete_many(
        [(a.job_id, a.token, 1), (d.job_id, -MAX_TOKEN - 1, 2), (c.job_id, c.token, 3)]
    )
    assert done == [True, False, True]
    info = await q.jobs.get(d.job_id)
    assert info is not None and info.state == "active"
    with pytest.raises(TypeError):
        await q.jobs.extend_many([(a.job_id, "1")], 1_000)  # type: ignore[list-item]
