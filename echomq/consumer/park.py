"""``Park``: an idle consumer's BLPOP on the wake key, on a connection of its own, with
its next claim pipelined behind it: Valkey runs it the moment the block ends, so a woken
job costs one round trip, not two. A claim whose answer was never read may have leased
jobs: the consumer asks again under the same claim id, which the claim scripts remember.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError

from ..queue import Queue
from ..scripts import Call
from .trouble import Trouble

# Connection settings a cluster node carries that only mean something to a cluster client.
_CLUSTER_ONLY = (
    "redis_connect_func",
    "himport_registry",
    "response_callbacks",
    "maint_notifications_config",
    "event_dispatcher",
)


def _once(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Connection settings that never re-send a command: a re-sent BLPOP + claim would
    block again while the first claim's jobs go unrun. The re-ask under the same claim id
    is the one retry there is."""
    kwargs = {k: v for k, v in kwargs.items() if k != "retry_on_timeout"}
    kwargs.update(retry=Retry(NoBackoff(), 0), retry_on_error=[])
    return kwargs


async def blocking_twin(conn: Any, key: str) -> Any:
    """A one-connection client to the server holding ``key``, like ``conn`` but with no
    socket timeout and no retry: a blocked connection must not sit in a shared pool nor
    trip its read timeout, and a lost reply must reach the park as an error. For a cluster,
    a plain client on the node serving ``key``'s slot (a MOVED error rebuilds it)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_kwargs"):
        kwargs = _once(dict(pool.connection_kwargs, socket_timeout=None))
        twin_pool = type(pool)(connection_class=pool.connection_class, max_connections=1, **kwargs)
        return type(conn).from_pool(twin_pool)
    if hasattr(conn, "get_node_from_key"):
        if getattr(conn, "_initialize", False):
            await conn.initialize()
        node = conn.get_node_from_key(key)
        kwargs = {k: v for k, v in node.connection_kwargs.items() if k not in _CLUSTER_ONLY}
        kwargs.update(host=node.host, port=node.port, socket_timeout=None)
        twin_pool = redis.asyncio.ConnectionPool(
            connection_class=node.connection_class, max_connections=1, **_once(kwargs)
        )
        return redis.asyncio.Redis.from_pool(twin_pool)
    raise TypeError(f"cannot park on a {type(conn).__name__}: no pool and no cluster nodes")


Until = Callable[..., Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Woken:
    """How a park with a claim behind it ended: the claim's raw ``reply``, or ``lost``
    (sent, its answer unread: ask again under the same claim id)."""

    reply: Any = None
    lost: bool = False


NOTHING = Woken()


class Park:
    """The BLPOP on ``queue``'s wake key; ``until`` is the consumer's (see ``waits.until``)."""

    def __init__(self, queue: Queue, until: Until) -> None:
        self.queue = queue
        self.until = until
        self.conn: Any = None  # the blocking connection, built on the first park
        self.trouble = Trouble("park")

    async def wait(self, timeout_ms: int, kick: asyncio.Event, claim: Call | None = None) -> Woken:
        """Park for up to ``timeout_ms``, or until a token arrives, ``kick`` is set or the
        consumer stops; then run ``claim``. Errors end in a short pause, never raise."""
        if kick.is_set():
            return NOTHING
        sent = False
        try:
            if self.conn is None:
                self.conn = await blocking_twin(self.queue.conn, self.queue.keys.wake)
            pipe = self.conn.pipeline(transaction=False)
            pipe.blpop([self.queue.keys.wake], timeout=timeout_ms / 1000)
            if claim is not None:
                pipe.execute_command(*self.queue.runner.evalsha(claim))
            sent = claim is not None
            replies: list[Any] = []

            async def park() -> None:
                replies.extend(await pipe.execute(raise_on_error=False))

            if not await self.until(park(), kick):
                # A cancelled read may leave the connection dirty: drop it.
                await self.drop()
                return Woken(lost=sent)
            self.trouble.ok()
            if isinstance(replies[0], Exception):
                raise replies[0]
            if not sent:
                return NOTHING
            if isinstance(replies[1], NoScriptError):
                return NOTHING  # it did not run: the next claim goes the usual way
            if isinstance(replies[1], Exception):
                return Woken(lost=True)  # an error reply ran nothing, but ask again to be sure
            return Woken(reply=replies[1])
        except Exception as e:  # noqa: BLE001 - any error: claim again after a pause
            self.trouble.note(e)
            await self.drop()  # broken, or its node no longer serves the key
            await self.until(asyncio.sleep(min(1.0, timeout_ms / 1000)))
            return Woken(lost=sent)

    async def drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and conn is not self.queue.conn:
            with contextlib.suppress(Exception):
                await conn.aclose()
