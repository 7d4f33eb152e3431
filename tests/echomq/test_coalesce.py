"""Enqueues made while one is in flight share a round trip (echomq.coalesce), each still
its own atomic script with its own reply or error, in the order the calls were made."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

import echomq
from echomq.coalesce import Coalescer
from echomq.scripts import Runner, Script

# Appends its argument to a list and answers the list's length: the order the scripts ran
# in, one by one. Refuses the argument "boom" with an error of its own.
_SOURCE = (
    "if ARGV[1] == 'boom' then return redis.error_reply('ERR boom') end "
    "return redis.call('RPUSH', KEYS[1], ARGV[1])"
)
_APPEND = Script("t_append", _SOURCE, hashlib.sha1(_SOURCE.encode()).hexdigest())


async def test_calls_made_while_one_is_in_flight_share_one_round_trip_in_order(
    redis_conn: Any, queue_name: str
) -> None:
    key = f"{queue_name}:order"
    coalescer = Coalescer(Runner(redis_conn))
    replies = await asyncio.gather(*(coalescer.run(_APPEND, [key], [str(i)]) for i in range(20)))
    # the first went alone; the 19 made while it was in flight went in one pipeline
    assert (coalescer.batches, coalescer.batched) == (1, 19)
    assert replies == list(range(1, 21))
    assert await redis_conn.lrange(key, 0, -1) == [str(i).encode() for i in range(20)]


async def test_each_call_gets_its_own_error_and_the_rest_run(
    redis_conn: Any, queue_name: str
) -> None:
    key = f"{queue_name}:errors"
    coalescer = Coalescer(Runner(redis_conn))
    args = ["a", "boom", "b", "boom", "c"]
    results = await asyncio.gather(
        *(coalescer.run(_APPEND, [key], [a]) for a in args), return_exceptions=True
    )
    assert coalescer.batches == 1
    assert [type(r).__name__ if isinstance(r, Exception) else r for r in results] == [
        1,
        "ResponseError",
        2,
        "ResponseError",
        3,
    ]
    assert await redis_conn.lrange(key, 0, -1) == [b"a", b"b", b"c"]


async def test_a_flushed_script_cache_is_reloaded_for_a_batch(
    redis_conn: Any, queue_name: str
) -> None:
    key = f"{queue_name}:noscript"
    coalescer = Coalescer(Runner(redis_conn))
    await redis_conn.script_flush()
    replies = await asyncio.gather(*(coalescer.run(_APPEND, [key], [str(i)]) for i in range(5)))
    assert replies == [1, 2, 3, 4, 5]
    assert coalescer.batches == 1


async def test_a_call_cancelled_before_it_is_sent_does_not_run(
    redis_conn: Any, queue_name: str
) -> None:
    key = f"{queue_name}:cancel"
    coalescer = Coalescer(Runner(redis_conn))
    first = asyncio.ensure_future(coalescer.run(_APPEND, [key], ["first"]))
    await asyncio.sleep(0)  # the first is in flight
    queued = [asyncio.ensure_future(coalescer.run(_APPEND, [key], [a])) for a in "xyz"]
    await asyncio.sleep(0)
    queued[1].cancel()
    results = await asyncio.gather(first, *queued, return_exceptions=True)
    assert isinstance(results[2], asyncio.CancelledError)
    assert await redis_conn.lrange(key, 0, -1) == [b"first", b"x", b"z"]


async def test_a_round_trip_that_fails_fails_every_call_in_it(queue_name: str) -> None:
    # nothing listens there: the connection is refused for the lone call and the batch
    conn = redis.asyncio.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    coalescer = Coalescer(Runner(conn))
    try:
        results = await asyncio.gather(
            *(coalescer.run(_APPEND, ["k"], [str(i)]) for i in range(4)),
            return_exceptions=True,
        )
    finally:
        await conn.aclose()
    assert all(isinstance(r, redis.exceptions.ConnectionError) for r in results), results
    assert coalescer.batches == 1


async def test_concurrent_lane_enqueues_coalesce_and_each_keeps_its_reply(
    redis_conn: Any, queue_name: str
) -> None:
    q = echomq.Queue(redis_conn, queue_name)
    receipts = await asyncio.gather(
        *(q.lanes.submit(f"p{i % 3}", {"n": i}, seq_scope="r") for i in range(30))
    )
    assert q.coalescer.batches >= 1 and q.coalescer.batched == 29
    assert len({r.job_id for r in receipts}) == 30
    assert all(r.created for r in receipts)
    # sequence numbers follow the order the calls were made
    assert [r.seq for r in receipts] == sorted(r.seq for r in receipts)
    assert (await q.stats())["pending"] == 30


async def test_a_cluster_client_sends_each_call_on_its_own(
    valkey_cluster: Any, queue_name: str
) -> None:
    conn = valkey_cluster.client(decode_responses=False)
    try:
        q = echomq.Queue(conn, queue_name)
        receipts = await asyncio.gather(*(q.lanes.submit("p", {"n": i}) for i in range(10)))
        assert len({r.job_id for r in receipts}) == 10
        assert (q.coalescer.batches, (await q.stats())["pending"]) == (0, 10)
    finally:
        await conn.aclose()


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Coalescer(Runner(None), max_batch=0)
