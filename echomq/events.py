"""``q.events``: the capped stream of outcomes (completed, failed, reaped, dead).

Entries are appended by the transition scripts themselves, so an event exists if and
only if its transition happened. Readers follow it with XREAD BLOCK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import text
from .types import Event

if TYPE_CHECKING:
    from .queue import Queue


class Events:
    def __init__(self, queue: Queue) -> None:
        self._q = queue

    async def read(
        self, after: str = "$", *, block_ms: int | None = None, count: int = 500
    ) -> list[Event]:
        """Events after ``after`` ("$" = only new ones), waiting up to ``block_ms``.
        Use a connection of its own for blocking reads."""
        reply: Any = await self._q.conn.xread(
            {self._q.keys.events: after}, count=count, block=block_ms
        )
        if not reply:
            return []
        # RESP2: [[stream, entries]]; RESP3: {stream: [entries]}
        entries = next(iter(reply.values()))[0] if isinstance(reply, dict) else reply[0][1]
        return [Event.from_entry(eid, fields) for eid, fields in entries]

    async def since(self, after: str, count: int = 1000) -> list[Event]:
        """Retained events strictly after ``after``, oldest first (no blocking)."""
        entries = await self._q.conn.xrange(self._q.keys.events, min=f"({after}", count=count)
        return [Event.from_entry(eid, fields) for eid, fields in entries]

    async def first_id(self) -> str | None:
        """The oldest retained event id (older ones were trimmed), or None when empty."""
        entries = await self._q.conn.xrange(self._q.keys.events, count=1)
        return text(entries[0][0]) if entries else None

    async def last_id(self) -> str:
        """The newest event id, or "0-0" when the stream is empty."""
        entries = await self._q.conn.xrevrange(self._q.keys.events, count=1)
        return text(entries[0][0]) if entries else "0-0"
