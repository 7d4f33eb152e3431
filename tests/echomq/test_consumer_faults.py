"""The Consumer under errors that are not disconnects (issue 11): a result JSON cannot
carry, a server that answers READONLY for a while, a task that ends, a cluster client."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

import echomq
from echomq.server import EmbeddedValkey
from tests.echomq.test_consumer import Runner, completed, start_consumer, wait_for

_ = start_consumer  # the fixture, shared with test_consumer


async def test_an_unencodable_result_fails_only_its_job(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    async def handler(claim: echomq.Claim) -> Any:
        return {1, 2} if claim.payload == "bad" else {"ok": claim.payload}

    bad = await q.jobs.enqueue("bad", max_attempts=1)
    good = [await q.jobs.enqueue(i) for i in range(40)]
    # Every slot shares pipelined completion batches with the bad one.
    c = await start_consumer(handler, source="jobs", concurrency=4, batch=8)
    await wait_for(lambda: completed(q, 40))
    await wait_for(lambda: _state_is(q, bad, "dead"))
    info = await q.jobs.get(bad)
    assert info is not None and info.error is not None
    assert info.error.startswith("ResultNotEncodable: the handler's result cannot be stored")
    for jid in good:
        got = await q.jobs.get(jid)
        assert got is not None and got.state == "completed"
    # No slot died: the consumer runs on, with all four.
    more = [await q.jobs.enqueue(i) for i in range(8)]
    await wait_for(lambda: completed(q, 48))

    async def counted_here() -> bool:  # the consumer counts once the reply is back
        return c.counts.completed >= 48

    await wait_for(counted_here)
    assert c.counts.failed == 1 and c.counts.completed == 48 and more


async def test_a_slot_survives_an_unencodable_result_with_concurrency_one(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    async def handler(claim: echomq.Claim) -> Any:
        return object() if claim.payload == "bad" else None

    await q.jobs.enqueue("bad", max_attempts=1)
    await start_consumer(handler, source="jobs", concurrency=1)
    await asyncio.sleep(0.3)
    await q.jobs.enqueue("fine")
    await wait_for(lambda: completed(q, 1))


async def _state_is(q: echomq.Queue, job_id: str, state: str) -> bool:
    info = await q.jobs.get(job_id)
    return info is not None and info.state == state


async def test_run_raises_when_a_background_task_ends(q: echomq.Queue) -> None:
    c = echomq.Consumer(q, lambda claim: asyncio.sleep(0), heartbeat_ms=100)

    async def ends() -> None:
        await asyncio.sleep(0.2)

    c._flush_loop = ends  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="completions ended unexpectedly"):
        await asyncio.wait_for(c.run(), 10)
    assert await q.conn.zscore(q.keys.workers, c.worker_id) is None  # left the registry


# -- a server that refuses writes for a while ----------------------------------------------


@pytest.fixture
async def private(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedValkey, redis.asyncio.Redis]]:
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="everysec")
    server.start()
    conn = redis.asyncio.Redis.from_url(server.url)
    try:
        yield server, conn
    finally:
        await conn.aclose()
        server.stop()


async def test_a_readonly_spell_kills_no_loop(
    private: tuple[EmbeddedValkey, redis.asyncio.Redis],
) -> None:
    """REPLICAOF an unreachable primary: every write is refused with READONLY (as after a
    failover) for 0.8 s, shorter than the lapse. Heartbeat, lease keeper, claimer, slots
    and completions must all go on: the worker never leaves the registry, and no job is
    reaped, delivered twice or lost."""
    server, conn = private
    q = echomq.Queue(conn, "ro")
    runs = Counter[str]()

    async def handler(claim: echomq.Claim) -> None:
        runs[claim.job_id] += 1
        await asyncio.sleep(0.05)

    ids = [await q.lanes.enqueue(f"l{i % 5}", i) for i in range(300)]
    c = echomq.Consumer(
        q, handler, lease_ms=4_000, lapse_ms=1_200, concurrency=4, reap_interval_ms=100
    )
    task = asyncio.create_task(c.run())
    await wait_for(lambda: completed(q, 20))
    admin = redis.Redis.from_url(server.url)
    try:
        admin.execute_command("REPLICAOF", "127.0.0.1", "1")
        with pytest.raises(redis.ReadOnlyError):
            admin.set("probe", "1")
        await asyncio.sleep(0.8)
        admin.execute_command("REPLICAOF", "NO", "ONE")
        await wait_for(lambda: completed(q, 300), 60)
        await asyncio.sleep(1.5)  # past another lapse: a dead heartbeat would show now
        assert await conn.zscore(q.keys.workers, c.worker_id) is not None
        assert not task.done()
    finally:
        admin.close()
        c.stop()
        await asyncio.wait_for(task, 20)
    stats = await q.stats()
    assert stats["counters"]["completed"] == 300 and stats["completed"] == 300
    assert stats["counters"].get("reaped", 0) == 0 and stats["active"] == 0
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}


async def test_a_valkey_freeze_longer_than_the_lapse_charges_no_stall(
    private: tuple[EmbeddedValkey, redis.asyncio.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    """Valkey frozen (SIGSTOP) for 2.5 s, twice the heartbeat lapse, while a live worker
    holds jobs, and a dead worker (it beat once, claimed, and never again) holds one. The
    first sweep after the freeze sees the gap (counted as an outage); the live worker's
    jobs are not reaped and no stall is charged to them; the dead worker's job is still
    reaped one lapse later, its stall counted (a worker that really died is judged as
    before). A freeze lets the beats queued in the sockets land at once, so the live jobs
    would mostly survive even without the detection: the checks that tell the two apart
    are in test_reaper_lock.py, where nobody reaches Valkey during the gap."""
    caplog.set_level(logging.INFO, logger="echomq")
    server, conn = private
    q = echomq.Queue(conn, "frozen")
    runs = Counter[str]()
    frozen = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        runs[claim.job_id] += 1
        if claim.payload == "slow":
            await frozen.wait()
            await asyncio.sleep(0.3)

    ghost = await q.lanes.enqueue("ghost", "orphan")
    await q.heartbeat("ghost-worker", 1_200)
    assert (await q.lanes.claim("ghost-worker", 60_000)) is not None
    slow = [await q.lanes.enqueue(f"l{i}", "slow") for i in range(3)]
    c = echomq.Consumer(
        q, handler, lease_ms=4_000, lapse_ms=1_200, concurrency=4, reap_interval_ms=100
    )
    task = asyncio.create_task(c.run())
    try:
        await wait_for(lambda: _holds(q, c.worker_id, 3))
        await asyncio.sleep(0.3)  # a sweep or two since the claims: the gap is the freeze
        os.kill(server.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(2.5)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        frozen.set()
        await wait_for(lambda: completed(q, 3), 20)
        # the ghost's grace runs out: reaped, then delivered to the live worker
        await wait_for(lambda: completed(q, 4), 20)
    finally:
        c.stop()
        await asyncio.wait_for(task, 20)
    stats = await q.stats()
    assert stats["counters"].get("outages", 0) >= 1
    for jid in slow:
        info = await q.jobs.get(jid)
        assert info is not None and info.state == "completed" and info.stalls == 0, info
    assert set(runs.values()) == {1} and sorted(runs) == sorted([*slow, ghost])
    orphan = await q.jobs.get(ghost)
    assert orphan is not None and orphan.stalls == 1 and orphan.state == "completed"
    assert stats["counters"].get("reaped", 0) == 1
    # one log line for the reap, the job's id as a field (JSON logs carry it)
    reaped = [r for r in caplog.records if r.getMessage().startswith("reaped ")]
    assert [getattr(r, "job_id", None) for r in reaped] == [ghost]


async def _holds(q: echomq.Queue, worker_id: str, n: int) -> bool:
    return int(await q.conn.scard(q.keys.worker_jobs(worker_id))) >= n


# -- a cluster client -------------------------------------------------------------------


def _cluster_port() -> int:
    """A free port a cluster node can use: its bus listens 10,000 above it, so the port
    must be 55535 or less (the kernel's free ports often are not)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port <= 55_535:
            with socket.socket() as bus:  # and its bus port must be free too
                try:
                    bus.bind(("127.0.0.1", port + 10_000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port at or below 55535 for a cluster node")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RedisCluster]:
    """A one-node Valkey Cluster (every slot on it) and a cluster client."""
    server = EmbeddedValkey(
        tmp_path / "valkey",
        port=_cluster_port(),
        appendfsync="everysec",
        extra_config={"cluster-enabled": "yes", "cluster-config-file": "nodes.conf"},
    )
    server.start()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    deadline = time.monotonic() + 10
    while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
        assert time.monotonic() < deadline, "cluster never came up"
        await asyncio.sleep(0.05)
    admin.close()
    conn = RedisCluster(host="127.0.0.1", port=server.port)
    try:
        yield conn
    finally:
        await conn.aclose()
        server.stop()


async def test_on_a_cluster_client_the_park_has_a_connection_of_its_own(
    cluster: RedisCluster,
) -> None:
    q = echomq.Queue(cluster, "cq")
    done: asyncio.Queue[str] = asyncio.Queue()

    async def handler(claim: echomq.Claim) -> str:
        await done.put(claim.job_id)
        return "ok"

    c = echomq.Consumer(q, handler, heartbeat_ms=100, reap_interval_ms=100, park_max_ms=30_000)
    task = asyncio.create_task(c.run())

    async def parked() -> bool:  # 0.3 s was not always enough on a loaded machine
        return c._park.conn is not None

    try:
        for n in range(3):
            await wait_for(parked)
            assert c._park.conn is not None and c._park.conn is not cluster
            assert isinstance(c._park.conn, redis.asyncio.Redis)
            c._kick.set()  # what our reaper does after moving jobs: the park is dropped
            await asyncio.sleep(0.1)
            assert await cluster.ping()  # the shared client is untouched
            t0 = time.monotonic()
            jid = await q.lanes.enqueue("a", n)
            assert await asyncio.wait_for(done.get(), 5) == jid
            assert time.monotonic() - t0 < 2  # woken by the wake key, not the timeout
        await wait_for(lambda: completed(q, 3))
    finally:
        c.stop()
        await asyncio.wait_for(task, 20)
    assert await cluster.ping()
