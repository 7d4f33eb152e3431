"""``Jobs.result`` on Valkey and Valkey Cluster: a job ended before the call, one that
ends while it waits (completed, dead, cancelled), and the timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

import echomq

pytestmark = pytest.mark.parametrize("valkey_backend", ["single", "cluster"], indirect=True)

LEASE = 5_000


async def test_a_job_finished_before_the_call_is_answered_at_once(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue(1)
    claim = await q.jobs.claim("w", LEASE)
    assert claim is not None and await q.jobs.complete(jid, claim.token, {"ok": True})
    info = await q.jobs.result(jid, timeout_ms=0)
    assert info is not None and info.state == "completed" and info.result == {"ok": True}


async def test_a_job_completed_while_waiting_is_answered(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue(1)
    waiting = asyncio.create_task(q.jobs.result(jid, timeout_ms=10_000))
    other = await q.jobs.enqueue(2)
    await asyncio.sleep(0.2)
    for _ in range(2):  # another job's end does not answer it
        claim = await q.jobs.claim("w", LEASE)
        assert claim is not None
        await q.jobs.complete(claim.job_id, claim.token, claim.job_id)
    info = await asyncio.wait_for(waiting, 10)
    assert info is not None and info.state == "completed" and info.result == jid
    assert other != jid


async def test_a_job_dead_or_cancelled_while_waiting_is_answered(q: echomq.Queue) -> None:
    dead = await q.jobs.enqueue(1, max_attempts=2)
    gone = await q.jobs.enqueue(2, delay_ms=60_000)
    waits = [asyncio.create_task(q.jobs.result(j, timeout_ms=10_000)) for j in (dead, gone)]
    await asyncio.sleep(0.2)
    for _ in range(2):
        claim = await q.jobs.claim("w", LEASE)
        assert claim is not None
        await q.jobs.fail(dead, claim.token, "boom", retry_in_ms=0)
        await asyncio.sleep(0.01)
    assert await q.jobs.cancel(gone)
    infos = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert [i.state if i else None for i in infos] == ["dead", "cancelled"]


async def test_a_job_still_running_times_out_with_none(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue(1)
    assert await q.jobs.claim("w", LEASE) is not None
    started = time.monotonic()
    assert await q.jobs.result(jid, timeout_ms=300) is None
    assert 0.25 <= time.monotonic() - started < 3
    assert await q.jobs.result("JOB_NOPE", timeout_ms=0) is None
    with pytest.raises(ValueError):
        await q.jobs.result(jid, timeout_ms=-1)
    with pytest.raises(TypeError):
        await q.jobs.result(jid, timeout_ms=1.5)  # type: ignore[arg-type]
