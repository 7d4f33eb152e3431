"""``connect(url)``: a redis-py asyncio client that packs commands with hiredis.

redis-py's asyncio connection builds every command's RESP bytes in pure Python (its
sync connection uses hiredis when installed). For a queue that sends one EVALSHA per
transition that is a measurable share of the client's CPU (~5 µs of ~30 µs per job in
``bench/bench_echomq.py``), so EchoMQ's clients pack with hiredis as the sync one does.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
from redis.asyncio.connection import Connection, UnixDomainSocketConnection

try:
    from redis.connection import HiredisRespSerializer

    _PACK: Any = HiredisRespSerializer().pack
except ImportError:  # hiredis missing: keep redis-py's own packer
    _PACK = None


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        if _PACK is None:
            return super().pack_command(*args)  # type: ignore[misc, no-any-return]
        return _PACK(*args)  # type: ignore[no-any-return]


class FastConnection(_HiredisPacking, Connection):
    """TCP connection packing with hiredis."""


class FastUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    """Unix-socket connection packing with hiredis."""


def connect(url: str, **kwargs: Any) -> redis.asyncio.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` or ``unix://``) with hiredis packing.
    Keyword arguments go to the connection pool (socket_timeout, max_connections, …)."""
    pool = redis.asyncio.ConnectionPool.from_url(url, **kwargs)
    if pool.connection_class is Connection:
        pool.connection_class = FastConnection
    elif pool.connection_class is UnixDomainSocketConnection:
        pool.connection_class = FastUnixConnection
    return redis.asyncio.Redis.from_pool(pool)
