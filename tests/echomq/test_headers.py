"""Job headers: str -> str beside the payload (a trace context), stored on the job's row
only when given, handed back with every claim and in ``JobInfo``."""

from __future__ import annotations

from typing import Any

import pytest

import echomq
from echomq.checks import MAX_HEADERS, MAX_HEADERS_BYTES
from tests.echomq.conftest import snapshot

LEASE = 5_000
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


async def test_lane_headers_come_back_with_the_claim_and_stay_out_of_the_payload(
    q: echomq.Queue,
) -> None:
    receipt = await q.lanes.submit("p1", {"g": 1}, headers={**TRACE, "tracestate": "k=v"})
    claim = await q.lanes.claim("w", LEASE)
    assert claim is not None and claim.job_id == receipt.job_id
    assert claim.payload == {"g": 1}
    assert dict(claim.headers) == {**TRACE, "tracestate": "k=v"}
    info = await q.jobs.get(receipt.job_id)
    assert info is not None and dict(info.headers) == {**TRACE, "tracestate": "k=v"}


async def test_plain_queue_headers_come_back_with_the_claim(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue({"a": 1}, headers=TRACE)
    claim = await q.jobs.claim("w", LEASE)
    assert claim is not None and claim.job_id == jid and dict(claim.headers) == TRACE


async def test_headers_survive_a_retry_and_a_release(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p1", {"a": 1}, headers=TRACE)
    first = await q.lanes.claim("w", LEASE)
    assert first is not None
    assert await q.jobs.fail(jid, first.token, "boom", retry_in_ms=0) == "scheduled"
    second = await q.lanes.claim("w", LEASE)
    assert second is not None and second.job_id == jid and dict(second.headers) == TRACE
    assert await q.jobs.release(jid, second.token)
    third = await q.lanes.claim("w", LEASE)
    assert third is not None and dict(third.headers) == TRACE


async def test_without_headers_no_field_is_written(q: echomq.Queue) -> None:
    lane_job = (await q.lanes.submit("p1", {"g": 1})).job_id
    empty = await q.lanes.enqueue("p2", {"g": 2}, headers={})
    plain = await q.jobs.enqueue({"a": 1}, headers=None)
    for jid in (lane_job, empty, plain):
        assert not await q.conn.hexists(q.keys.job(jid), "headers")
    claims = (await q.lanes.claim_many("w", LEASE, 5)).claims
    claims.append(await q.jobs.claim("w", LEASE))  # type: ignore[arg-type]
    assert len(claims) == 3
    assert all(c.headers == {} for c in claims)
    # the shared empty mapping: a claim without headers allocates none
    assert all(c.headers is echomq.types.NO_HEADERS for c in claims)


async def test_a_replay_keeps_the_original_headers(q: echomq.Queue) -> None:
    first = await q.lanes.submit("p1", {"g": 1}, headers=TRACE)
    again = await q.lanes.submit(
        "p1", {"g": 1}, job_id=first.job_id, headers={"traceparent": "other"}
    )
    assert not again.created
    info = await q.jobs.get(first.job_id)
    assert info is not None and dict(info.headers) == TRACE


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([("traceparent", "x")], TypeError),
        ("traceparent=x", TypeError),
        ({"traceparent": 1}, TypeError),
        ({1: "x"}, TypeError),
        ({"": "x"}, ValueError),
        ({f"h{i}": "x" for i in range(MAX_HEADERS + 1)}, ValueError),
        ({"big": "x" * MAX_HEADERS_BYTES}, ValueError),
        ({"bad": "\udc80"}, ValueError),
    ],
)
async def test_bad_headers_are_refused_before_anything_is_sent(
    q: echomq.Queue, headers: Any, error: type[Exception]
) -> None:
    before = await snapshot(q)
    with pytest.raises(error):
        await q.lanes.submit("p1", {"g": 1}, headers=headers)
    with pytest.raises(error):
        await q.lanes.enqueue("p1", {"g": 1}, headers=headers)
    with pytest.raises(error):
        await q.jobs.enqueue({"g": 1}, headers=headers)
    assert await snapshot(q) == before


async def test_headers_at_the_bounds_are_accepted(q: echomq.Queue) -> None:
    many = {f"h{i}": "x" for i in range(MAX_HEADERS)}
    jid = await q.jobs.enqueue(1, headers=many)
    key = "k"
    big = {key: "x" * (MAX_HEADERS_BYTES - len(key))}
    jid2 = await q.jobs.enqueue(2, headers=big)
    got = {c.job_id: dict(c.headers) for c in (await q.jobs.claim_many("w", LEASE, 2)).claims}
    assert got == {jid: many, jid2: big}
