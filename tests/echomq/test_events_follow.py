"""Following the events stream (``Events.follow``, ``Tail``) against real servers: typed
entries, several queues in one read, RESP2 and RESP3 clients, a Valkey restart ridden
out from where the tail was, and the trimmed-history check a resuming reader needs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis.asyncio

import echomq
from echomq.backoff import Backoff
from echomq.events import Followed, Tail, stream_position
from echomq.server import EmbeddedValkey
from harness.cluster import ValkeyCluster

PROTOCOLS = [2, 3]


@pytest.fixture(params=PROTOCOLS, ids=["resp2", "resp3"])
async def conn(request: pytest.FixtureRequest, valkey_url: str) -> AsyncIterator[Any]:
    c = redis.asyncio.Redis.from_url(valkey_url, protocol=request.param)
    try:
        yield c
    finally:
        await c.aclose()


def name() -> str:
    return f"t{uuid4().hex[:10]}"


async def complete(q: echomq.Queue, n: int, tag: str = "") -> list[str]:
    """Enqueue, claim and complete ``n`` jobs (one ``completed`` event each), in order."""
    ids = [await q.jobs.enqueue({"i": i}) for i in range(n)]
    batch = await q.jobs.claim_many("WRK_t", 10_000, n)
    assert [c.job_id for c in batch.claims] == ids
    done = await q.jobs.complete_many([(c.job_id, c.token, {"tag": tag}) for c in batch.claims])
    assert all(done)
    return ids


async def take(it: AsyncIterator[Any], n: int, timeout: float = 10) -> list[Any]:
    out: list[Any] = []
    async with asyncio.timeout(timeout):
        while len(out) < n:
            out.append(await anext(it))
    return out


async def test_follow_from_now_yields_typed_events_appended_after_it_started(conn: Any) -> None:
    q = echomq.Queue(conn, name())
    await complete(q, 2, "before")  # already there: not followed from "$"
    it = q.events.follow(block_ms=100).__aiter__()
    first = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.2)  # the tail has resolved "$" and is blocked in XREAD
    ids = await complete(q, 3, "after")
    events = [await first, *await take(it, 2)]
    assert [e.job_id for e in events] == ids
    assert all(isinstance(e, echomq.Event) and e.type == "completed" for e in events)
    assert [e.result for e in events] == [{"tag": "after"}] * 3
    assert sorted(events, key=lambda e: stream_position(e.event_id)) == events


async def test_follow_after_an_id_yields_strictly_after_it(conn: Any) -> None:
    q = echomq.Queue(conn, name())
    ids = await complete(q, 5)
    retained = await q.events.since("0-0")
    events = await take(q.events.follow(after=retained[1].event_id, block_ms=100), 3)
    assert [e.job_id for e in events] == ids[2:]


async def test_a_tail_follows_several_queues_in_one_read(conn: Any) -> None:
    a, b = echomq.Queue(conn, name()), echomq.Queue(conn, name())
    await complete(a, 1)
    tail = Tail([a, b], block_ms=100, after="0-0")
    it = tail.batches()
    first = await take(it, 1)
    assert [(queue.name, event.type) for queue, event in first[0]] == [(a.name, "completed")]
    ids_a, ids_b = await complete(a, 2), await complete(b, 3)
    got: list[Followed] = []
    while len(got) < 5:
        got += list((await take(it, 1))[0])
    assert [event.job_id for queue, event in got if queue is a] == ids_a
    assert [event.job_id for queue, event in got if queue is b] == ids_b
    assert tail.positions == {a.name: (await a.events.last_id()), b.name: await b.events.last_id()}


async def test_a_tail_refuses_what_is_no_stream_id(conn: Any) -> None:
    q = echomq.Queue(conn, name())
    with pytest.raises(ValueError, match="stream id"):
        Tail([q], after="yesterday")
    with pytest.raises(ValueError, match="at least one"):
        Tail([])
    with pytest.raises(ValueError):
        Tail([q], block_ms=0)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=["resp2", "resp3"])
async def test_the_tail_rides_out_a_valkey_restart_from_where_it_was(
    tmp_path: Path, protocol: int
) -> None:
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="always")
    await asyncio.to_thread(server.start)
    reader = redis.asyncio.Redis.from_url(
        server.url, protocol=protocol, socket_timeout=2, socket_connect_timeout=1
    )
    errors: list[BaseException] = []
    tail = Tail(
        [echomq.Queue(reader, "restarts")],
        block_ms=100,
        backoff=Backoff(first=0.05, cap=0.2, jitter=False),
        on_error=lambda exc, delay: errors.append(exc),
    )
    it = tail.__aiter__()
    try:
        first = asyncio.ensure_future(anext(it))
        await asyncio.sleep(0.2)
        before = await _complete_on(server.url, 3)
        got = [await first, *await take(it, 2)]
        pending = asyncio.ensure_future(anext(it))  # the tail blocks on, across the outage
        await asyncio.to_thread(server.stop)
        async with asyncio.timeout(10):
            while not errors:
                await asyncio.sleep(0.02)
        assert not pending.done()
        await asyncio.to_thread(server.start)
        after = await _complete_on(server.url, 3)  # a writer of its own: not under test
        got += [(await pending), *await take(it, 2)]
        assert [event.job_id for _, event in got] == before + after  # nothing missed, none twice
        assert all(isinstance(e, (redis.ConnectionError, OSError)) for e in errors)
    finally:
        await it.aclose()
        await reader.aclose()
        await asyncio.to_thread(server.stop)


async def _complete_on(url: str, n: int) -> list[str]:
    writer = redis.asyncio.Redis.from_url(url)
    try:
        return await complete(echomq.Queue(writer, "restarts"), n)
    finally:
        await writer.aclose()


async def test_trimmed_after_says_when_a_resume_point_may_have_lost_events(
    redis_conn: Any,
) -> None:
    q = echomq.Queue(redis_conn, name(), echomq.Settings(events_maxlen=10))
    assert not await q.events.trimmed_after("0-0")  # no stream yet
    await complete(q, 5)
    assert not await q.events.trimmed_after("0-0")  # nothing trimmed yet
    for _ in range(4):
        await complete(q, 100)  # MAXLEN ~ trims whole nodes (100 entries each)
    oldest = await q.events.first_id()
    assert oldest is not None
    assert await q.events.trimmed_after("0-0")
    assert not await q.events.trimmed_after(oldest)
    assert not await q.events.trimmed_after(await q.events.last_id())
    with pytest.raises(ValueError):
        await q.events.trimmed_after("not-an-id")


async def test_on_a_cluster_a_tail_follows_one_slot_and_refuses_several(
    valkey_cluster: ValkeyCluster,
) -> None:
    conn = valkey_cluster.client()
    try:
        a, b = echomq.Queue(conn, name()), echomq.Queue(conn, name())
        with pytest.raises(ValueError, match="one slot"):
            Tail([a, b])
        ids = await complete(a, 3)
        events = await take(a.events.follow(after="0-0", block_ms=100), 3)
        assert [e.job_id for e in events] == ids
    finally:
        await conn.aclose()
