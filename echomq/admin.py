"""Cheap reads for operators and their tools, each one command whose cost does not grow
with the queue, so a metrics scrape may call them freely. Richer reads: ``q.jobs.dead()``,
:mod:`echomq.registry`, ``q.stats()``."""

from __future__ import annotations

from . import checks
from .codec import text
from .queue import Queue


async def dead_count(queue: Queue) -> int:
    """Dead jobs ``queue`` still holds (not yet discarded or retried)."""
    return int(await queue.conn.zcard(queue.keys.dead))


async def dead_before(queue: Queue, before_ms: int, limit: int = 1_000) -> list[str]:
    """The ids of at most ``limit`` dead jobs that died at or before ``before_ms`` (server
    clock), oldest death first."""
    checks.integer("before_ms", before_ms, at_least=0)
    checks.integer("limit", limit, at_least=1)
    raw = await queue.conn.zrangebyscore(queue.keys.dead, 0, before_ms, start=0, num=limit)
    return [text(jid) for jid in raw]


async def worker_count(queue: Queue) -> int:
    """Workers registered on ``queue`` now (alive: their heartbeat has not been found
    lapsed, and they have not stopped)."""
    return int(await queue.conn.zcard(queue.keys.workers))
