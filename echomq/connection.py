"""``connect(url)``: a redis-py asyncio client for a Valkey server or a Valkey Cluster."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.connection import HiredisRespSerializer
from redis.utils import HIREDIS_AVAILABLE

# redis-py defines the serializer even without hiredis; only its flag says it works.
_PACK: Any = HiredisRespSerializer().pack if HIREDIS_AVAILABLE else None

Client = redis.asyncio.Redis | RedisCluster
"""What :func:`connect` returns."""

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
    """``RedisCluster`` that learns the topology before a command is routed: redis-py 8.1
    routes first, so a fresh client's concurrent commands went to the wrong nodes (MOVED,
    connections closed mid-handshake; tests/distributed/test_cluster_client.py)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)


def cluster_url(url: str) -> tuple[str, bool]:
    """``(plain url, is a cluster)``: the URL without the cluster marker redis-py refuses."""
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
    a ``RedisCluster`` for a cluster URL. Keyword arguments go to every pool.

    ``pool_timeout``: a command that finds every connection busy waits up to this many
    seconds for one (then ``ConnectionError``) instead of failing at once. Not on a
    cluster, whose nodes have no blocking pool: there ``max_connections`` is a hard bound."""
    plain, cluster = cluster_url(url)
    if cluster:
        if urlsplit(plain).scheme == "unix":
            raise ValueError("a cluster is reached over TCP, not a unix socket")
        client = ClusterClient.from_url(plain, **kwargs)
        # Nodes' pools are built from these kwargs (the seeds already were); TLS left alone.
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
    """``[url]`` for a single server; for a cluster URL, a plain URL for every live node of
    ``CLUSTER NODES``, replicas too (``CLUSTER SLOTS`` omits one that replicated nothing
    yet): for checks that must reach every node."""
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
