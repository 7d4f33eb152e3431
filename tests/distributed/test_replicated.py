"""``Settings(replicas=1)``: an enqueue returns only once a replica has the job (WAIT on the
connection that wrote it), else ``NotReplicated`` — on one master with a replica, and on a
cluster (the WAIT goes to the node serving the queue's slot)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

import echomq
from echomq.server import EmbeddedValkey
from harness.cluster import ValkeyCluster

REPLICATED = echomq.Settings(replicas=1, replica_timeout_ms=2_000)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[EmbeddedValkey, EmbeddedValkey]]:
    """A master and its replica (DEBUG allowed on the replica, to stall it)."""
    # A replica syncs at once (the default waits 5 s for others to join).
    master = EmbeddedValkey(
        tmp_path / "m",
        maxmemory=64 * 1024**2,
        extra_config={"repl-diskless-sync-delay": "0", "shutdown-timeout": "0"},
    )
    master.start()
    replica = EmbeddedValkey(
        tmp_path / "r",
        maxmemory=64 * 1024**2,
        extra_config={
            "replicaof": f"127.0.0.1 {master.port}",
            "enable-debug-command": "yes",
        },
    )
    replica.start()
    with redis.Redis(host="127.0.0.1", port=replica.port) as r:
        deadline = time.monotonic() + 10
        while r.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replica never synced"
            time.sleep(0.05)
    try:
        yield master, replica
    finally:  # throwaway data: no clean shutdown to wait for
        replica.kill()
        master.kill()


@pytest.fixture
async def conn(pair: tuple[EmbeddedValkey, EmbeddedValkey]) -> AsyncIterator[redis.asyncio.Redis]:
    c = redis.asyncio.Redis.from_url(pair[0].url)
    try:
        yield c
    finally:
        await c.aclose()


async def test_a_replicated_enqueue_is_on_the_replica_when_it_returns(
    pair: tuple[EmbeddedValkey, EmbeddedValkey], conn: redis.asyncio.Redis
) -> None:
    q = echomq.Queue(conn, "rep", REPLICATED)
    replica = redis.asyncio.Redis.from_url(pair[1].url)
    try:
        for i in range(20):
            jid = await q.jobs.enqueue(i)
            assert await replica.hget(q.keys.job(jid), "body") == b"%d" % i  # pending, there
            receipt = await q.lanes.submit("p", i, seq_scope="r")
            assert await replica.hget(q.keys.job(receipt.job_id), "seq") == str(i).encode()
    finally:
        await replica.aclose()


async def test_without_its_replica_an_enqueue_is_refused_and_its_replay_confirms_later(
    pair: tuple[EmbeddedValkey, EmbeddedValkey], conn: redis.asyncio.Redis
) -> None:
    q = echomq.Queue(conn, "rep", echomq.Settings(replicas=1, replica_timeout_ms=300))
    pair[1].kill()
    t0 = time.monotonic()
    with pytest.raises(echomq.NotReplicated) as refused:
        await q.lanes.submit("p", "x", job_id="JOB_01JZZZZZZZZZZZZZZZZZZZZZZZ", seq_scope="r")
    assert time.monotonic() - t0 >= 0.25  # it waited for the replica, then gave up
    assert refused.value.acked == 0 and refused.value.wanted == 1
    info = await q.jobs.get(refused.value.job_id)
    assert info is not None and info.state == "pending"  # there, but not acknowledged
    pair[1].start()  # back: it resyncs from the master
    deadline = time.monotonic() + 15
    while True:
        try:
            again = await q.lanes.submit(
                "p", "x", job_id="JOB_01JZZZZZZZZZZZZZZZZZZZZZZZ", seq_scope="r"
            )
            break
        except echomq.NotReplicated:
            assert time.monotonic() < deadline, "the replica never confirmed"
    assert again.job_id == refused.value.job_id and not again.created and again.seq == 0


async def test_a_replay_waits_for_the_replica_to_have_a_job_another_connection_wrote(
    pair: tuple[EmbeddedValkey, EmbeddedValkey], conn: redis.asyncio.Redis
) -> None:
    """The replicated client never wrote this job, so WAIT on its connection alone would
    confirm at once; the mark written after the replay makes it wait for the job."""
    replica = redis.Redis(host="127.0.0.1", port=pair[1].port, socket_timeout=10)
    stall = threading.Thread(target=replica.execute_command, args=("DEBUG", "SLEEP", "1.5"))
    stall.start()
    try:
        await asyncio.sleep(0.1)  # the replica is asleep: it acknowledges nothing
        plain = echomq.Queue(conn, "rep")
        jid = await plain.jobs.enqueue("written elsewhere")
        other = redis.asyncio.Redis.from_url(pair[0].url)
        try:
            q = echomq.Queue(other, "rep", echomq.Settings(replicas=1, replica_timeout_ms=300))
            with pytest.raises(echomq.NotReplicated):
                await q.jobs.enqueue("replay", job_id=jid)
        finally:
            await other.aclose()
    finally:
        stall.join()
        replica.close()


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(tmp_path_factory.mktemp("repcluster"), masters=3, replicas=1)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_on_a_cluster_the_wait_goes_to_the_node_of_the_queue(
    replicated_cluster: ValkeyCluster,
) -> None:
    conn = replicated_cluster.client()
    try:
        for name in ("guesses", "rounds", "a", "b", "c"):  # slots on different masters
            q = echomq.Queue(conn, name, REPLICATED)
            owner = replicated_cluster.master_of(q.keys.prefix)
            (replica,) = replicated_cluster.replicas_of(owner)
            jobs = await asyncio.gather(*(q.lanes.enqueue(f"l{i % 3}", i) for i in range(30)))
            with replicated_cluster.admin(replica) as r:
                r.execute_command("READONLY")
                assert all(r.hget(q.keys.job(j), "body") is not None for j in jobs)
    finally:
        await conn.aclose()
