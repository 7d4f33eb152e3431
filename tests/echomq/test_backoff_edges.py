"""Edges of the retry delay that the backoff tests (test_faults.py) do not reach.

Found by the Lua mutation table (tools/mutation/lua_mutants.py,
``backoff-zero-delay-is-backoff``): ``retry_in_ms=0`` is an explicit "retry now", not
"no delay given" (which is ``None`` and means backoff).
"""

from __future__ import annotations

import echomq
from tests.echomq.conftest import locations

LEASE = 60_000


async def test_retry_in_zero_is_due_at_once_and_claimed_again(q: echomq.Queue) -> None:
    q = echomq.Queue(q.conn, q.name, echomq.Settings(backoff_ms=5_000))
    jid = await q.jobs.enqueue("x", max_attempts=3)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    before = await q.server_time_ms()
    assert await q.jobs.fail(jid, c.token, "again", retry_in_ms=0) == "scheduled"
    after = await q.server_time_ms()
    due = await q.conn.zscore(q.keys.scheduled, jid)
    assert due is not None and before <= due <= after  # not the 5 s backoff
    again = await q.jobs.claim("w", LEASE)  # a claim promotes due jobs first
    assert again is not None and (again.job_id, again.token) == (jid, 2)
    assert await locations(q, jid) == ["active"]


async def test_jitter_spreads_first_retries_both_ways_within_the_ratio(q: echomq.Queue) -> None:
    # ±20 % of 1 s: every first retry lands in [800, 1200] ms, and 40 of them do not all
    # land on one side of 1 s (a one-sided or a missing jitter does, with certainty; a
    # fair one with probability 2**-39).
    q = echomq.Queue(q.conn, q.name, echomq.Settings(backoff_ms=1_000, jitter=0.2))
    ids = [await q.jobs.enqueue(i, max_attempts=3) for i in range(40)]
    batch = await q.jobs.claim_many("w", LEASE, len(ids))
    delays = []
    for c in batch.claims:
        before = await q.server_time_ms()
        assert await q.jobs.fail(c.job_id, c.token, "boom") == "scheduled"
        after = await q.server_time_ms()
        due = int(await q.conn.zscore(q.keys.scheduled, c.job_id))
        assert 800 <= due - before and due - after <= 1_200
        delays.append(due - after)
    assert min(delays) < 1_000 < max(delays)
