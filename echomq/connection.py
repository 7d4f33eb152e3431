"""``connect(url)``: a redis-py asyncio client for a Valkey server or a Valkey Cluster.

A URL names a cluster by its scheme (``redis+cluster://host:port``, ``rediss+cluster://``)
or by the query ``?cluster=true``; the host and port are any one node (a seed): the
client learns the others and which node serves which slot, follows ``MOVED`` after a
resharding or a failover, and re-reads the topology when a node stops answering. Anything
else is a single server (``redis://``, ``rediss://``, ``unix://``).

redis-py's asyncio connection builds every command's RESP bytes in pure Python (its
sync connection uses hiredis when installed). For a queue that sends one EVALSHA per
transition that is a measurable share of the client's CPU (~5 µs of ~30 µs per job in
``bench/bench_echomq.py``), so EchoMQ's clients pack with hiredis as the sync one does,
on a single server and on every node of a cluster.

Retries: redis-py 8.1 re-sends a command whose reply was lost (``ConnectionError``,
``TimeoutError``), 10 times at most with a jittered backoff from 10 ms to 1 s, on a
client built by ``redis.asyncio.Redis(...)`` and on a cluster's alike; a server's pool
built from a URL (``Redis.from_url``, and so ``connect``) re-sends nothing unless given
``retry=``. A re-sent script may have run already, so every EchoMQ transition is safe to
run twice: enqueue (an existing id is a no-op), claim (its client-minted claim id makes a
re-run answer the batch it leased), complete (a repeat under the same token answers True,
counting nothing), extend; a re-run fail or release whose first run was applied answers
stale (issue 21, item 3; docs/reliability.md). The one connection that never re-sends,
whatever the client's setting, is a consumer's park (:mod:`echomq.consumer.park`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

# redis-py defines its hiredis serializer whether or not hiredis imports (or is a release it
# accepts); only its flag says whether packing with it would work.
_PACK: Any = HiredisRespSerializer().pack if HIREDIS_AVAILABLE else None

Client = redis.asyncio.Redis | RedisCluster

_TRUE = ("1", "true", "yes", "on")


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        if _PACK is None:
            return super().pack_command(*args)  # type: ignore[misc, no-any-return]
        return _PACK(*args)  # type: ignore[no-any-return]


class FastConnection(_HiredisPacking, Connection):
    """TCP connection packing with hiredis."""


class FastUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    """Unix-socket connection packing with hiredis."""


class ClusterClient(RedisCluster):
    """``RedisCluster`` that learns the topology before a command is routed.

    redis-py 8.1 resolves a command's slot and policy before it initializes the client, so
    many commands sent at once by a fresh client (or one that dropped its topology after
    a failover) went to the wrong nodes: MOVED replies, and connections closed under other
    commands mid-handshake (``'NoneType' object has no attribute 'writelines'``; 9 of 10
    trials of 100 concurrent SETs). Initializing first, under the client's lock, is what
    a warm client does anyway (tests/distributed/test_cluster_client.py)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)


def cluster_url(url: str) -> tuple[str, bool]:
    """``(plain url, is a cluster)``: the URL with the cluster marker taken out, which
    redis-py's own URL parser would refuse (an unknown scheme or query argument)."""
    parts = urlsplit(url)
    if "cluster" not in parts.scheme and "cluster" not in parts.query:
        return url, False  # untouched: urlunsplit would rewrite unix:///path as unix:/path
    scheme, cluster = parts.scheme, False
    if scheme.endswith("+cluster"):
        scheme, cluster = scheme.removesuffix("+cluster"), True
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "cluster":
            cluster = cluster or value.lower() in _TRUE
        else:
            query.append((key, value))
    return urlunsplit(parts._replace(scheme=scheme, query=urlencode(query))), cluster


def is_cluster(url: str) -> bool:
    return cluster_url(url)[1]


def connect(url: str, *, pool_timeout: float | None = None, **kwargs: Any) -> Client:
    """A client for ``url`` with hiredis packing: a ``redis.asyncio.Redis`` for a server,
    a ``redis.asyncio.RedisCluster`` for a cluster URL (see the module docstring).
    Keyword arguments go to the connection pool, or to every node's pool on a cluster
    (socket_timeout, max_connections, …).

    ``pool_timeout``: a server's pool blocks a command that finds all ``max_connections``
    busy for up to this many seconds until one is free (redis-py's
    ``BlockingConnectionPool``; then ``ConnectionError``), instead of failing it at once
    with ``MaxConnectionsError``. redis-py's cluster nodes have no blocking pool: on a
    cluster each node's ``max_connections`` is a hard bound, which the caller keeps its
    work under (the web's door does)."""
    plain, cluster = cluster_url(url)
    if cluster:
        if urlsplit(plain).scheme == "unix":
            raise ValueError("a cluster is reached over TCP, not a unix socket")
        client = ClusterClient.from_url(plain, **kwargs)
        # Every node's pool is built from the client's connection kwargs (the seeds were
        # built already): swap the plain TCP class for ours, leave TLS alone.
        if client.nodes_manager.connection_kwargs.get("connection_class") is Connection:
            client.nodes_manager.connection_kwargs["connection_class"] = FastConnection
            for node in client.nodes_manager.startup_nodes.values():
                node.connection_class = FastConnection
        return client
    if pool_timeout is not None:
        pool: redis.asyncio.ConnectionPool = redis.asyncio.BlockingConnectionPool.from_url(
            plain, timeout=pool_timeout, **kwargs
        )
    else:
        pool = redis.asyncio.ConnectionPool.from_url(plain, **kwargs)
    if pool.connection_class is Connection:
        pool.connection_class = FastConnection
    elif pool.connection_class is UnixDomainSocketConnection:
        pool.connection_class = FastUnixConnection
    return redis.asyncio.Redis.from_pool(pool)


def node_urls(url: str, **kwargs: Any) -> list[str]:
    """``[url]`` for a single server; for a cluster URL, a plain URL (the seed's scheme,
    credentials and query) for every node the seed's ``CLUSTER NODES`` lists, masters and
    replicas (``CLUSTER SLOTS``, which clients route by, leaves out a replica that has
    replicated nothing yet), failed or address-less ones left out. For checks that must
    reach every node, such as durability at start-up."""
    plain, cluster = cluster_url(url)
    if not cluster:
        return [url]
    with redis.Redis.from_url(plain, **kwargs) as seed:
        raw = seed.execute_command("CLUSTER", "NODES")
    nodes = raw.decode() if isinstance(raw, bytes) else str(raw)
    parts = urlsplit(plain)
    userinfo = parts.netloc.rpartition("@")[0]
    out = []
    for line in nodes.splitlines():
        fields = line.split()
        if len(fields) < 3 or {"fail", "noaddr", "handshake"} & set(fields[2].split(",")):
            continue
        address = fields[1].split("@")[0]  # host:port@bus[,hostname]
        netloc = f"{userinfo}@{address}" if userinfo else address
        out.append(urlunsplit(parts._replace(netloc=netloc)))
    return out


def connect_sync(url: str, **kwargs: Any) -> redis.Redis | redis.RedisCluster:
    """``connect`` for synchronous code (a signal-time note, a start-up check)."""
    plain, cluster = cluster_url(url)
    if cluster:
        return redis.RedisCluster.from_url(plain, **kwargs)
    return redis.Redis.from_url(plain, **kwargs)
