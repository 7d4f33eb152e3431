"""``Claim.progress`` on Valkey and Valkey Cluster: in the row and the stream, fenced by
the claim's token, its value checked before anything is sent."""

from __future__ import annotations

import asyncio

import pytest

import echomq
from echomq.results import MAX_PROGRESS_BYTES
from tests.echomq.conftest import snapshot

pytestmark = pytest.mark.parametrize("valkey_backend", ["single", "cluster"], indirect=True)

LEASE = 5_000


async def test_progress_is_in_get_and_in_the_stream(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("a", 1)
    claim = await q.lanes.claim("w", LEASE)
    assert claim is not None
    assert await claim.progress({"done": 1, "of": 4})
    assert await claim.progress(0.75)
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "active" and info.progress == 0.75
    events = [e for e in await q.events.since("0-0") if e.type == "progress"]
    assert [(e.job_id, e.progress, e.fields["lane"]) for e in events] == [
        (jid, {"done": 1, "of": 4}, "a"),
        (jid, 0.75, "a"),
    ]
    assert await q.jobs.complete(jid, claim.token, "r")
    done = await q.jobs.get(jid)
    assert done is not None and done.progress == 0.75 and done.result == "r"


async def test_a_stale_holders_progress_is_refused(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue(1)
    first = await q.jobs.claim("w1", 1)
    assert first is not None
    await asyncio.sleep(0.05)
    assert await q.stalled.reap() == [jid]
    second = await q.jobs.claim("w2", LEASE)
    assert second is not None and second.token == first.token + 1
    before = await snapshot(q)
    assert await first.progress("old") is False
    after = await snapshot(q)
    assert after.pop(q.keys.refused) == {b"progress": b"1"}
    before.pop(q.keys.refused, None)
    assert after == before
    assert await second.progress("new")
    info = await q.jobs.get(jid)
    assert info is not None and info.progress == "new"


async def test_progress_is_checked_before_anything_is_sent(q: echomq.Queue) -> None:
    await q.jobs.enqueue(1)
    claim = await q.jobs.claim("w", LEASE)
    assert claim is not None
    with pytest.raises(TypeError):
        await claim.progress(object())
    with pytest.raises(ValueError):
        await claim.progress("x" * MAX_PROGRESS_BYTES)
    with pytest.raises(RuntimeError):
        await echomq.Claim("J", None, {}, echomq.Token(1, ""), 0).progress(1)
    assert (await q.stats())["refused"] == {}


async def test_a_consumers_handler_reports_progress(q: echomq.Queue) -> None:
    done = asyncio.Event()

    async def handler(claim: echomq.Claim) -> str:
        assert await claim.progress("half")
        done.set()
        return "whole"

    jid = await q.lanes.enqueue("a", 1)
    consumer = echomq.Consumer(q, handler, lease_ms=5_000)
    runner = asyncio.create_task(consumer.run())
    try:
        info = await q.jobs.result(jid, timeout_ms=10_000)
    finally:
        consumer.stop()
        await asyncio.wait_for(runner, 10)
    assert done.is_set()
    assert info is not None and info.progress == "half" and info.result == "whole"
