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
from tests.cli.running import ROOT
from tests.cluster import ValkeyCluster


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
