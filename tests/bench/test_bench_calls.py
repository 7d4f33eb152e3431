"""The calls ``bench_echomq`` pipelines by the thousand leave exactly what the library's own
enqueue leaves: the same keys of the same types, and a job a claim then finds. A copy of the
scripts' KEYS there once went stale (two keys short) and every static key shifted by two,
so the memory figures of that bench were measured on a mis-keyed queue."""

from __future__ import annotations

import orjson
import redis.asyncio

from bench.queue.lifecycle import PAYLOAD, enqueue_call
from bench.queue.memory import game_enqueue_call
from echomq import Queue
from echomq.codec import text


async def layout(conn: redis.asyncio.Redis, q: Queue) -> dict[str, str]:
    """Each key of ``q`` (its job rows as one ``job:*``) and its type."""
    out: dict[str, str] = {}
    async for key in conn.scan_iter(match=f"{q.keys.prefix}*"):
        suffix = text(key).removeprefix(q.keys.prefix)
        name = "job:*" if suffix.startswith("job:") else suffix
        out[name] = text(await conn.type(key))
    return out


async def test_a_bench_lane_enqueue_leaves_what_submit_leaves(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    payload = orjson.dumps(PAYLOAD)
    ours, theirs = Queue(redis_conn, f"{queue_name}a"), Queue(redis_conn, f"{queue_name}b")
    reply = await ours.runner.run(*enqueue_call(ours, "lanes", 7, 100, payload))
    assert int(reply[0]) == 1
    await theirs.lanes.submit("L007", PAYLOAD)
    assert await layout(redis_conn, ours) == await layout(redis_conn, theirs)
    batch = await ours.lanes.claim_many("w", 60_000, 8)
    assert [c.lane for c in batch.claims] == ["L007"]
    assert batch.claims[0].payload == PAYLOAD


async def test_a_bench_game_enqueue_leaves_what_a_numbered_submit_leaves(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    payload = orjson.dumps(PAYLOAD)
    ours, theirs = Queue(redis_conn, f"{queue_name}a"), Queue(redis_conn, f"{queue_name}b")
    await ours.runner.run(*game_enqueue_call(ours, 3, 1000, payload))
    lane = f"PLR_{3:026d}"
    await theirs.lanes.submit(lane, PAYLOAD, seq_scope=str(PAYLOAD["round_id"]))
    assert await layout(redis_conn, ours) == await layout(redis_conn, theirs)
    claim = (await ours.lanes.claim_many("w", 60_000, 1)).claims[0]
    assert (claim.lane, claim.seq) == (lane, 0)


async def test_a_bench_plain_enqueue_leaves_what_enqueue_leaves(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    payload = orjson.dumps(PAYLOAD)
    ours, theirs = Queue(redis_conn, f"{queue_name}a"), Queue(redis_conn, f"{queue_name}b")
    await ours.runner.run(*enqueue_call(ours, "jobs", 0, 0, payload))
    await theirs.jobs.enqueue(PAYLOAD)
    assert await layout(redis_conn, ours) == await layout(redis_conn, theirs)
    assert (await ours.jobs.claim("w", 60_000)) is not None
