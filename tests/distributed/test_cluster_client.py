"""``echomq.connect`` on a cluster URL: which URLs mean a cluster, and a fresh client that
is sent many commands at once (the first thing a web process does under load)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

import echomq
from echomq.connection import ClusterClient, cluster_url, connect
from harness.cluster import ValkeyCluster
from harness.running import ROOT


@pytest.mark.parametrize(
    ("url", "plain", "cluster"),
    [
        ("redis://h:7000/0", "redis://h:7000/0", False),
        ("redis+cluster://:pw@h:7000/0", "redis://:pw@h:7000/0", True),
        ("rediss+cluster://h:7000", "rediss://h:7000", True),
        (
            "redis://h:7000/0?cluster=true&socket_timeout=3",
            "redis://h:7000/0?socket_timeout=3",
            True,
        ),
        ("redis://h:7000/0?cluster=no", "redis://h:7000/0", False),
        ("unix:///run/v.sock?password=x", "unix:///run/v.sock?password=x", False),
    ],
)
def test_a_url_names_a_cluster_by_scheme_or_query(url: str, plain: str, cluster: bool) -> None:
    assert cluster_url(url) == (plain, cluster)


async def test_a_plain_url_gives_a_plain_client(valkey_url: str) -> None:
    conn = connect(valkey_url)
    try:
        assert isinstance(conn, redis.asyncio.Redis) and await conn.ping()
    finally:
        await conn.aclose()


def test_a_cluster_is_not_reached_over_a_unix_socket() -> None:
    with pytest.raises(ValueError, match="unix socket"):
        connect("unix:///run/v.sock?cluster=true")


async def test_a_fresh_cluster_client_takes_many_commands_at_once(
    valkey_cluster: ValkeyCluster,
) -> None:
    """redis-py 8.1's RedisCluster routed a fresh client's concurrent commands before it
    knew the slots (MOVED, connections closed mid-handshake); ours learns them first."""
    for attempt in range(5):
        conn = connect(valkey_cluster.url)
        assert isinstance(conn, ClusterClient) and isinstance(conn, RedisCluster)
        try:  # first commands: 100 SETs at once
            await asyncio.gather(*(conn.set(f"fresh:{attempt}:{i}", i) for i in range(100)))
        finally:
            await conn.aclose()
        conn = connect(valkey_cluster.url)
        try:  # first commands: 100 enqueue scripts at once
            q = echomq.Queue(conn, f"fresh{attempt}")
            ids = await asyncio.gather(*(q.lanes.enqueue(f"l{i % 3}", i) for i in range(100)))
            assert len(set(ids)) == 100
            assert (await q.stats())["pending"] == 100
        finally:
            await conn.aclose()


def test_web_refuses_a_cluster_whose_replica_is_not_durable(tmp_path: Path) -> None:
    """Every node is checked at start-up, replicas too: any of them may be the master
    after a failover."""
    cluster = ValkeyCluster(tmp_path / "c", masters=1, replicas=1)
    cluster.start()
    try:
        replica = cluster.ports[1]
        with cluster.admin(replica) as admin:
            admin.config_set("maxmemory-policy", "allkeys-lru")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "codemojex",
                "web",
                "--valkey-url",
                cluster.url,
                "--database-url",
                f"sqlite:///{tmp_path / 'x.db'}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")},
        )
    finally:
        cluster.stop()
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"codemojex: refusing redis://127.0.0.1:{replica}/"), done.stderr
    assert "noeviction" in done.stderr and done.stderr.strip().count("\n") == 0


async def test_a_lane_claim_whose_reply_is_lost_on_a_cluster_leases_only_what_it_answers(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Issue 21, item 3: redis-py's cluster client re-sends a command on ConnectionError
    (10 times in 8.1). A proxy in front of every master drops the one reply of a
    ``lane_claim``: the re-run used to lease a second batch (``claim_many(2)`` answered 2,
    the worker's set held 4, the extra 2 reaped later with a stall each); it now answers
    the first run's batch."""
    from echomq.scripts import SCRIPTS
    from tests.echomq.reply_proxy import Arm, ReplyDropper

    arm = Arm()
    masters = sorted({port for _, _, port, _ in valkey_cluster.slots()})
    proxies = {p: await ReplyDropper("127.0.0.1", p, arm).start() for p in masters}
    remap = {p: proxy.listen_port for p, proxy in proxies.items()}

    def address_remap(address: tuple[str, int]) -> tuple[str, int]:
        host, port = address
        return ("127.0.0.1", remap[port]) if port in remap else (host, port)

    direct = valkey_cluster.client()
    via = connect(valkey_cluster.url, address_remap=address_remap)
    name = f"lost{os.getpid()}{id(arm) % 10_000}"
    try:
        q, qp = echomq.Queue(direct, name), echomq.Queue(via, name)
        for i in range(4):
            await q.lanes.enqueue(f"l{i}", i)
        await qp.stats()  # warm: the topology is known, through the proxies
        node = valkey_cluster.master_of(q.keys.prefix)
        with valkey_cluster.admin(node) as admin:
            admin.script_load(SCRIPTS["lane_claim"].source)
        arm.marker = SCRIPTS["lane_claim"].sha.encode()

        got = await qp.lanes.claim_many("W", 60_000, 2)

        assert arm.dropped == 1
        held = {echomq.codec.text(m) for m in await direct.smembers(q.keys.worker_jobs("W"))}
        assert len(got.claims) == 2 and held == {c.job_id for c in got.claims}
        assert (await q.stats())["counters"].get("replayed") == 1
        assert await q.jobs.complete_many([(c.job_id, c.token, None) for c in got.claims]) == [
            True,
            True,
        ]
        assert (await q.stats())["active"] == 0  # nothing left to reap, no stall to charge
    finally:
        await via.aclose()
        await direct.aclose()
        for proxy in proxies.values():
            await proxy.stop()
