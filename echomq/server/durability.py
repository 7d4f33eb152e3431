"""Whether any server, embedded or not, keeps what it acknowledged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
import redis.asyncio

from echomq.errors import NotDurable

_DURABLE_KEYS = ("appendonly", "maxmemory-policy", "appendfsync")


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _from_config(raw: Mapping[Any, Any]) -> dict[str, str | None]:
    found = {_text(key): _text(value) for key, value in raw.items()}
    return {key: found.get(key) for key in _DURABLE_KEYS}


def _from_info(persistence: Mapping[str, Any], memory: Mapping[str, Any]) -> dict[str, str | None]:
    aof = persistence.get("aof_enabled")
    return {
        "appendonly": None if aof is None else ("yes" if int(aof) == 1 else "no"),
        "maxmemory-policy": _text(memory.get("maxmemory_policy")),
        "appendfsync": None,  # INFO does not report it
    }


def _judge(settings: Mapping[str, str | None]) -> None:
    problems: list[str] = []
    appendonly = settings.get("appendonly")
    if appendonly != "yes":
        problems.append(
            f"AOF is off (appendonly={appendonly}), so a restart loses every acknowledged job; "
            "set `appendonly yes`"
        )
    policy = settings.get("maxmemory-policy")
    if policy != "noeviction":
        problems.append(
            f"maxmemory-policy is {policy}, so Valkey may evict job rows under memory pressure "
            "(an evicted job is a lost job); set `maxmemory-policy noeviction`"
        )
    if problems:
        fsync = settings.get("appendfsync")
        suffix = f" (appendfsync={fsync})" if fsync else ""
        raise NotDurable("Valkey is not durable" + suffix + ": " + "; ".join(problems))


async def check_durable(conn: redis.asyncio.Redis | redis.asyncio.RedisCluster) -> None:
    """Raise ``NotDurable`` unless the server has AOF on and ``maxmemory-policy noeviction``.
    Reads CONFIG GET; where CONFIG is disabled or renamed, falls back to INFO."""
    try:
        settings = _from_config(await conn.config_get(*_DURABLE_KEYS))
    except redis.ResponseError:
        settings = _from_info(await conn.info("persistence"), await conn.info("memory"))
    _judge(settings)


def check_durable_sync(conn: redis.Redis) -> None:
    """``check_durable`` for a synchronous client."""
    try:
        settings = _from_config(conn.config_get(*_DURABLE_KEYS))
    except redis.ResponseError:
        settings = _from_info(conn.info("persistence"), conn.info("memory"))
    _judge(settings)
