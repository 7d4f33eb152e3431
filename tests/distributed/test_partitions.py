"""``echomq.Partitioned``: one logical queue over N slots (``emq:{name:i}:``), on the
session's 3-master cluster and on one node."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from redis.crc import key_slot

import echomq
import echomq.registry
from echomq.partitions import (
    SLOTS,
    Partitioned,
    PartitionedConsumer,
    partition_names,
    partition_of,
)
from harness.cluster import ValkeyCluster

pytestmark = pytest.mark.parametrize("valkey_backend", ["single", "cluster"], indirect=True)


def test_a_lane_always_maps_to_the_same_partition(valkey_backend: str) -> None:
    # CRC-32, not the per-process salted hash(): every process agrees.
    assert [partition_of(f"PLR_{i}", 4) for i in range(8)] == [
        partition_of(f"PLR_{i}", 4) for i in range(8)
    ]
    assert partition_of("lane", 1) == 0
    assert {partition_of(f"l{i}", 3) for i in range(100)} == {0, 1, 2}


async def test_partitions_live_in_their_own_slots_across_masters(
    redis_conn: Any, valkey_backend: str, request: pytest.FixtureRequest, queue_name: str
) -> None:
    pq = Partitioned(redis_conn, queue_name, 6)
    prefixes = [q.keys.prefix for q in pq.partitions]
    assert prefixes == [f"emq:{{{q}}}:" for q in partition_names(queue_name, 6)]
    assert all(p.startswith(f"emq:{{{queue_name}:{i}") for i, p in enumerate(prefixes))
    # Partition i's slot lies in the i-th sixth of the slots: two per master of three.
    slots = [key_slot(p.encode()) for p in prefixes]
    assert [s * 6 // SLOTS for s in slots] == list(range(6))
    if valkey_backend == "cluster":
        cluster: ValkeyCluster = request.getfixturevalue("valkey_cluster")
        masters = [cluster.master_of(p) for p in prefixes]
        assert len(set(masters)) == 3 and all(masters.count(m) == 2 for m in masters)
        three = [q.keys.prefix for q in Partitioned(redis_conn, "guesses", 3).partitions]
        assert len({cluster.master_of(p) for p in three}) == 3  # the game's: one each


async def test_every_job_is_handled_once_by_a_partitioned_consumer(
    redis_conn: Any, queue_name: str
) -> None:
    pq = Partitioned(redis_conn, queue_name, 3)
    ids: list[str] = []
    for start in range(0, 300, 50):
        ids += await asyncio.gather(
            *(pq.enqueue(f"l{i % 30}", i) for i in range(start, start + 50))
        )
    s = await pq.stats()
    assert s["pending"] == 300 and sum(s["lanes"].values()) == 300
    assert all(p["pending"] > 0 for p in s["partitions"])  # spread over all three
    seen: collections.Counter[str] = collections.Counter()

    async def handler(claim: echomq.Claim) -> int:
        seen[claim.job_id] += 1
        assert pq.of_lane(str(claim.lane)).keys.prefix.startswith(f"emq:{{{queue_name}:")
        return int(claim.payload)

    c = PartitionedConsumer(pq, handler, concurrency=8, heartbeat_ms=100, reap_interval_ms=100)
    assert [x.concurrency for x in c.consumers] == [3, 3, 2]
    task = asyncio.create_task(c.run())
    try:
        async with asyncio.timeout(30):
            while (await pq.stats())["completed"] < 300:
                await asyncio.sleep(0.05)
    finally:
        c.stop()
        await asyncio.wait_for(task, 20)
    assert set(seen) == set(ids) and set(seen.values()) == {1}
    s = await pq.stats()
    assert s["completed"] == s["counters"]["completed"] == 300 == c.counts.completed
    assert s["active"] == s["pending"] == 0
    info = await pq.get(ids[7])
    assert info is not None and info.state == "completed" and info.result == 7
    assert await pq.find("JOB_01JZZZZZZZZZZZZZZZZZZZZZZZ") is None


async def test_the_registry_describes_a_partitioned_worker_by_its_latest_beat(
    redis_conn: Any, queue_name: str
) -> None:
    # A job held on the last partition only: that partition's consumer beats at the busy
    # cadence, the first one's (holding nothing) at the idle one. The worker must read as
    # busy, holding the job, within a busy beat, not when the idle one comes round.
    pq = Partitioned(redis_conn, queue_name, 3)
    lane = next(f"l{i}" for i in range(100) if partition_of(f"l{i}", 3) == 2)
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        started.set()
        await release.wait()

    c = PartitionedConsumer(
        pq, handler, concurrency=3, heartbeat_ms=100, idle_heartbeat_ms=60_000, worker_id="WRK_p"
    )
    task = asyncio.create_task(c.run())
    try:
        async with asyncio.timeout(10):
            while not await pq.workers():  # registered (the consumers beat as they start)
                await asyncio.sleep(0.02)
        job = await pq.enqueue(lane, 1)
        await asyncio.wait_for(started.wait(), 10)
        async with asyncio.timeout(3):  # 30 busy beats; the idle beat is a minute away
            while True:
                (w,) = await pq.workers()
                if w.meta.get("state") == "busy":
                    break
                await asyncio.sleep(0.05)
        assert w.meta["jobs"] == job
        (r,) = await echomq.registry.workers(pq)
        assert r.state == "busy" and r.jobs == (job,)
        one = await echomq.registry.worker(pq, "WRK_p")
        assert one is not None and one.state == "busy" and one.alive
    finally:
        release.set()
        c.stop()
        await asyncio.wait_for(task, 20)


async def test_a_lane_keeps_its_order_seq_and_cap_in_its_partition(
    redis_conn: Any, queue_name: str
) -> None:
    pq = Partitioned(redis_conn, queue_name, 4)
    got = [await pq.submit("p1", i, seq_scope="r", max_pending=3) for i in range(3)]
    assert [r.seq for r in got] == [0, 1, 2]
    with pytest.raises(echomq.LaneFull):
        await pq.submit("p1", 3, seq_scope="r", max_pending=3)
    q = pq.of_lane("p1")
    batch = await q.lanes.claim_many("w", 60_000, 10)
    assert [c.payload for c in batch.claims] == [0, 1, 2]


async def test_one_partition_is_the_plain_queue(redis_conn: Any, queue_name: str) -> None:
    # A game can start unpartitioned: N = 1 keeps the queue's own keys, no ":0".
    pq = Partitioned(redis_conn, queue_name, 1)
    assert [q.keys.prefix for q in pq.partitions] == [f"emq:{{{queue_name}}}:"]
    job = await pq.enqueue("any-lane", 1)
    assert (await echomq.Queue(redis_conn, queue_name).jobs.get(job)) is not None


async def test_stats_and_workers_are_summed_over_the_partitions(
    redis_conn: Any, queue_name: str
) -> None:
    pq = Partitioned(redis_conn, queue_name, 3)
    for i in range(30):
        await pq.enqueue(f"l{i}", i)
    each = [await q.stats() for q in pq.partitions]
    s = await pq.stats()
    assert set(s) == set(each[0]) | {"partitions"}  # a QueueStats, plus each partition's
    assert s["lane_count"] == sum(e["lane_count"] for e in each) == 30
    assert s["counters"]["enqueued"] == 30 and len(s["lanes"]) == 30
    assert len((await pq.stats(max_lanes=5))["lanes"]) == 5
    # A stale completion refused on one partition is counted in the sum.
    claimed = await pq.partitions[1].lanes.claim_many("w1", 60_000, 1)
    (claim,) = claimed.claims
    assert not await pq.partitions[1].jobs.complete(claim.job_id, claim.token + 1, "late")
    assert sum((await pq.stats())["refused"].values()) == 1
    # One worker id registered on every partition is one worker.
    for q in pq.partitions:
        await q.heartbeat("WRK_one", 10_000)
    assert [w.worker_id for w in await pq.workers()] == ["WRK_one"]
    name = pq.partitions[2].name
    assert pq.named(name) is pq.partitions[2] and pq.named(queue_name) is None
