"""Priority on the plain queue and inside lanes: higher first, FIFO among equals; a lane
keeps its one fair turn among lanes; a job put back keeps its priority. On one node and
on Valkey Cluster."""

from __future__ import annotations

import pytest

import echomq
from tests.echomq.fair_order import FairOrder

pytestmark = pytest.mark.parametrize("valkey_backend", ("single", "cluster"), indirect=True)

LEASE = 5_000


async def _drain_plain(q: echomq.Queue) -> list[str]:
    out = []
    while (c := await q.jobs.claim("w", LEASE)) is not None:
        out.append(c.payload)
    return out


async def test_plain_jobs_go_by_priority_then_mint_order(q: echomq.Queue) -> None:
    for name, pri in [("a", 0), ("b", 5), ("c", -3), ("d", 5), ("e", 0), ("f", 1000)]:
        await q.jobs.enqueue(name, priority=pri)
    assert await _drain_plain(q) == ["f", "b", "d", "a", "e", "c"]


async def test_a_batch_claim_takes_the_same_order(q: echomq.Queue) -> None:
    for name, pri in [("a", 0), ("b", 2), ("c", 1), ("d", 2)]:
        await q.jobs.enqueue(name, priority=pri)
    batch = await q.jobs.claim_many("w", LEASE, 10)
    assert [c.payload for c in batch.claims] == ["b", "d", "c", "a"]


async def test_a_row_writes_pri_only_when_not_zero(q: echomq.Queue) -> None:
    plain = await q.jobs.enqueue("x")
    high = await q.jobs.enqueue("y", priority=7)
    assert await q.conn.hget(q.keys.job(plain), "pri") is None
    assert await q.conn.hget(q.keys.job(high), "pri") == b"7"
    assert await q.conn.zscore(q.keys.pending, plain) == 0
    assert await q.conn.zscore(q.keys.pending, high) == -7


async def test_released_reaped_and_retried_jobs_keep_their_priority(q: echomq.Queue) -> None:
    await q.jobs.enqueue("low")
    high = await q.jobs.enqueue("high", priority=9)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == high
    assert await q.jobs.release(c.job_id, c.token)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == high  # released: still ahead of "low"
    assert await q.jobs.fail(c.job_id, c.token, "boom", retry_in_ms=0) == "scheduled"
    c = await q.jobs.claim("w", LEASE)  # the claim promotes the due retry first
    assert c is not None and c.job_id == high
    assert await q.jobs.extend(c.job_id, c.token, 1)
    await q.conn.zadd(q.keys.active, {c.job_id: 0})  # its lease long expired
    assert high in await q.stalled.reap()
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == high
    assert await q.jobs.complete(c.job_id, c.token)
    assert await _drain_plain(q) == ["low"]


async def test_a_dead_job_retried_keeps_its_priority(q: echomq.Queue) -> None:
    await q.jobs.enqueue("low")
    high = await q.jobs.enqueue("high", priority=3, max_attempts=1)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == high
    assert await q.jobs.fail(c.job_id, c.token, "boom") == "dead"
    await q.jobs.retry_dead(high)
    assert await _drain_plain(q) == ["high", "low"]


async def test_inside_a_lane_jobs_go_by_priority(q: echomq.Queue) -> None:
    for name, pri in [("a1", 0), ("a2", 4), ("a3", 4), ("a4", -1)]:
        await q.lanes.enqueue("a", name, priority=pri)
    got = []
    while (c := await q.lanes.claim("w", LEASE)) is not None:
        got.append(c.payload)
    assert got == ["a2", "a3", "a1", "a4"]


async def test_a_lane_keeps_its_fair_turn_whatever_its_priorities(q: echomq.Queue) -> None:
    # Lane "hi" holds only high-priority jobs; "lo" only low ones: the lanes still
    # alternate exactly as the fair order says for lanes with no priority at all.
    for i in range(4):
        await q.lanes.enqueue("hi", f"h{i}", priority=1000)
        await q.lanes.enqueue("lo", f"l{i}", priority=-1000)
    order, depth, expected = FairOrder(), {"hi": 4, "lo": 4}, []
    order.activate("hi")
    order.activate("lo")
    while (lane := order.take()) is not None:
        depth[lane] -= 1
        order.served(lane, depth[lane] > 0)
        expected.append(lane)
    got = []
    while (c := await q.lanes.claim("w", LEASE)) is not None:
        got.append(c.lane)
    assert got == expected


async def test_submit_takes_priority_too(q: echomq.Queue) -> None:
    await q.lanes.submit("a", "x")
    y = await q.lanes.submit("a", "y", priority=2, seq_scope="s")
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.job_id == y.job_id


@pytest.mark.parametrize("bad", [1001, -1001])
async def test_a_priority_out_of_range_is_a_value_error(q: echomq.Queue, bad: int) -> None:
    with pytest.raises(ValueError, match="priority"):
        await q.jobs.enqueue("x", priority=bad)
    with pytest.raises(ValueError, match="priority"):
        await q.lanes.enqueue("a", "x", priority=bad)
    assert (await q.stats())["pending"] == 0


@pytest.mark.parametrize("bad", [1.5, "3", True, None])
async def test_a_priority_not_an_int_is_a_type_error(q: echomq.Queue, bad: object) -> None:
    with pytest.raises(TypeError, match="priority"):
        await q.jobs.enqueue("x", priority=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority"):
        await q.lanes.submit("a", "x", priority=bad)  # type: ignore[arg-type]
