"""A socket's side of the fan-out: its bounded outbox and whether it fell behind.

The hub never waits for a socket: it offers each message, and a full outbox marks the
socket evicted (its handler then closes it with 4008). Score messages carry their job id,
so a socket sends each job's score at most once even where a replay and the live feed
overlap.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

OUTBOX_LIMIT = 512  # messages a socket may have queued before it counts as too slow
SENT_IDS_KEPT = 4_096  # job ids remembered per socket for the at-most-once rule


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message for one socket, serialised once however many sockets get it."""

    text: str
    job_id: str | None = None  # set on score messages, for the per-socket dedupe


class Connection:
    """The hub's side of one socket: who it is, its bounded outbox, whether it fell behind."""

    def __init__(self, player_id: str, limit: int = OUTBOX_LIMIT) -> None:
        self.player_id = player_id
        self.outbox: asyncio.Queue[Outgoing] = asyncio.Queue(limit)
        self.evicted = asyncio.Event()
        self._sent: OrderedDict[str, None] = OrderedDict()

    def offer(self, message: Outgoing) -> bool:
        """Queue ``message`` without waiting; a full outbox evicts the socket."""
        if self.evicted.is_set():
            return False
        try:
            self.outbox.put_nowait(message)
        except asyncio.QueueFull:
            self.evicted.set()
            return False
        return True

    def first_time(self, job_id: str | None) -> bool:
        """True the first time a job's score goes out on this socket (a resuming socket
        gets the replay and the live feed at once, and they overlap)."""
        if job_id is None:
            return True
        if job_id in self._sent:
            return False
        self._sent[job_id] = None
        if len(self._sent) > SENT_IDS_KEPT:
            self._sent.popitem(last=False)
        return True
