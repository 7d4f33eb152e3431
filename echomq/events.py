"""``q.events``: the capped stream of outcomes, and :class:`Tail` over several queues."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from . import checks
from .backoff import Backoff
from .codec import text
from .types import Event

if TYPE_CHECKING:
    from .queue import Queue

log = logging.getLogger("echomq.events")

# A tail retries these: the server gone, loading, refusing (OOM, READONLY) or silent.
READ_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError, asyncio.TimeoutError)

# The event types that end a job (a failure that ends it appends ``failed`` then ``dead``);
# ``progress`` reports a running job's ``Claim.progress``.
FINAL = frozenset({"completed", "dead", "cancelled"})
PROGRESS = "progress"

OnError = Callable[[BaseException, float], None]
"""Told of each failed read: the error and the seconds until the next try."""


def stream_position(event_id: str) -> tuple[int, int]:
    """``"ms-seq"`` (or ``"ms"``) as a comparable pair; ``ValueError`` if it is no id."""
    ms, _, seq = event_id.partition("-")
    if not ms.isdigit() or (seq and not seq.isdigit()):
        raise ValueError(f"not a stream id: {event_id!r}")
    return int(ms), int(seq or 0)


def xread_entries(reply: Any) -> list[tuple[str, list[Any]]]:
    """XREAD's reply as ``(stream key, entries)`` pairs, whether RESP2 (a list of
    ``[stream, entries]``) or RESP3 (a map of stream to ``[entries]``); [] for none."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [(text(stream), value[0]) for stream, value in reply.items()]
    return [(text(stream), entries) for stream, entries in reply]


# A plain pair: a named tuple cost a third more per event on a reader's path.
Followed: TypeAlias = tuple["Queue", Event]


def _log_error(exc: BaseException, delay: float) -> None:
    log.warning("events: %s: %s; reading again in %.1fs", type(exc).__name__, exc, delay)


class Tail:
    """Follows the events streams of ``queues`` in one ``XREAD BLOCK`` per read.

    Args:
        queues: the queues to follow, at least one, on one server (on a cluster, one slot).
        conn: the client to read on, best of its own with a socket timeout above
            ``block_ms``. Default: the first queue's.
        after: where to start: ``"$"`` (only events appended from now on), an event id
            (strictly after it) for every queue, or a mapping of queue name to either.
            ``"$"`` is resolved before the first read, so a retry misses nothing.
        block_ms: how long one read waits for an event (>= 1).
        count: at most this many events per stream per read (>= 1).
        backoff: the pause between failed reads; default 0.1 s doubling up to 5 s.
        on_error: told of each failed read (the error, the pause before the next);
            default a warning. It may raise to end the tail.

    Iterate over it for ``(queue, event)`` pairs, or over :meth:`batches` (cheaper per
    event). It never ends on its own: a server or connection error (``READ_ERRORS``) is
    retried from :attr:`positions`; any other error is raised.
    """

    def __init__(
        self,
        queues: Sequence[Queue],
        *,
        conn: Any = None,
        after: str | Mapping[str, str] = "$",
        block_ms: int = 5_000,
        count: int = 500,
        backoff: Backoff | None = None,
        on_error: OnError | None = None,
    ) -> None:
        if not queues:
            raise ValueError("a tail follows at least one queue")
        checks.integer("block_ms", block_ms, at_least=1)
        checks.integer("count", count, at_least=1)
        starts = after if isinstance(after, Mapping) else {q.name: after for q in queues}
        for q in queues:
            start = starts.get(q.name, "$")
            if start != "$":
                stream_position(start)  # ValueError before anything is read
        self.queues = list(queues)
        self.conn = conn if conn is not None else queues[0].conn
        if isinstance(self.conn, RedisCluster) and len(queues) > 1:
            slots = {key_slot(q.keys.events.encode()) for q in queues}
            if len(slots) > 1:  # XREAD would answer CROSSSLOT on every try, for ever
                raise ValueError(
                    "on a cluster a tail's queues must share one slot: give each its own tail"
                )
        self.block_ms = block_ms
        self.count = count
        self.backoff = backoff or Backoff(first=0.1, cap=5.0, jitter=False)
        self.on_error: OnError = on_error or _log_error
        self._by_key = {q.keys.events: q for q in queues}
        self._start = {q.keys.events: starts.get(q.name, "$") for q in queues}
        self._positions: dict[str, str] = {}  # stream key -> last id read ("$" resolved)

    @property
    def positions(self) -> dict[str, str]:
        """Queue name -> the id of the last event read (``after`` for a new tail)."""
        return {self._by_key[k].name: v for k, v in self._positions.items()}

    async def __aiter__(self) -> AsyncGenerator[Followed, None]:
        async for batch in self.batches():
            for followed in batch:
                yield followed

    async def batches(self) -> AsyncGenerator[Iterator[Followed], None]:
        """Each read's events as a lazy iterator of ``(queue, event)`` pairs (a list cost
        as much as the loop itself); :attr:`positions` are past the read already."""
        while True:
            try:
                if not self._positions:
                    self._positions = {k: await self._resolve(k, s) for k, s in self._start.items()}
                reply = await self.conn.xread(
                    self._positions, count=self.count, block=self.block_ms
                )
                self.backoff.reset()
            except READ_ERRORS as exc:
                delay = self.backoff.next_delay()
                self.on_error(exc, delay)
                await asyncio.sleep(delay)
                continue
            read = [
                (self._by_key[key], entries) for key, entries in xread_entries(reply) if entries
            ]
            if not read:
                continue  # the block ran out: read again
            for queue, entries in read:
                self._positions[queue.keys.events] = text(entries[-1][0])
            yield _decoded(read)

    async def _resolve(self, key: str, start: str) -> str:
        if start != "$":
            return start
        entries = await self.conn.xrevrange(key, count=1)
        return text(entries[0][0]) if entries else "0-0"


def _decoded(read: list[tuple[Queue, list[Any]]]) -> Iterator[Followed]:
    for queue, entries in read:
        for raw_id, fields in entries:
            yield queue, Event.from_entry(raw_id, fields)


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
        return [
            Event.from_entry(eid, fields) for _, es in xread_entries(reply) for eid, fields in es
        ]

    async def follow(
        self,
        after: str = "$",
        *,
        conn: Any = None,
        block_ms: int = 5_000,
        count: int = 500,
        on_error: OnError | None = None,
    ) -> AsyncIterator[Event]:
        """Every event after ``after`` as it is appended; a failed read is retried from
        the last event read (:class:`Tail` follows several queues in one read).

        Args:
            after: ``"$"`` or an event id (strictly after it).
            conn: a client of its own for the blocking reads (socket timeout above
                ``block_ms``); default the queue's.
            block_ms: how long one read waits.
            count: at most this many events per read.
            on_error: told of each failed read (error, seconds to the next try).
        """
        tail = Tail(
            [self._q], conn=conn, after=after, block_ms=block_ms, count=count, on_error=on_error
        )
        async for batch in tail.batches():
            for _, event in batch:
                yield event

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

    async def trimmed_after(self, after: str) -> bool:
        """True when events after ``after`` may have been trimmed (the stream is capped at
        ``settings.events_maxlen``), so a reader resuming from it may have missed some."""
        pos = stream_position(after)
        try:
            info = await self._q.conn.xinfo_stream(self._q.keys.events)
        except redis.ResponseError:
            return False  # no stream yet: nothing was ever trimmed
        length = int(info.get("length", 0))
        if int(info.get("entries-added", length)) <= length:
            return False  # nothing ever trimmed
        if length:
            oldest = stream_position(text(info["first-entry"][0]))
        else:
            last = stream_position(text(info.get("last-generated-id", b"0-0")))
            oldest = (last[0], last[1] + 1)
        # Which trimmed ids came after `after` is unknown: older than the oldest is a gap.
        return pos < oldest
