"""A socket's side of the fan-out: who it is, where its frames go, whether it fell behind.

The hub never waits for a socket. It hands each frame to the socket's :class:`FrameSink`
(one ``transport.write``); what the kernel has not taken yet stays in the transport's
buffer, and a socket whose buffer passes :data:`OUTBOX_BYTES` is evicted — closed 4008,
and the page resumes with ``after=`` — so a slow browser costs the process at most that
much memory and slows no one else. Until its greeting is sent, a socket's frames wait in
a short list, so that the round always comes first.

Score messages carry their job id, so a socket sends each job's score at most once even
where a replay and the live feed overlap. A snapshot written during the greeting (a round's
progress) drops the frames of its topic that waited since before it was taken, and any
equal to it: the socket never gets the same progress twice, nor an older one after it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from web.frames import FrameSink, text_frame

OUTBOX_BYTES = 256 * 1024  # unsent bytes a socket may hold before it counts as too slow
GREETING_BACKLOG = 512  # frames that may wait for a socket's greeting to finish
SENT_IDS_KEPT = 4_096  # job ids remembered per socket for the at-most-once rule
CLOSE_TOO_SLOW = 4008


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message as a whole frame, built once however many sockets get it."""

    frame: bytes
    job_id: str | None = None  # set on score messages, for the per-socket dedupe
    topic: str | None = None  # set on whole-state messages (a round's progress)

    @classmethod
    def of(cls, message: object, job_id: str | None = None, topic: str | None = None) -> Outgoing:
        return cls(text_frame(orjson.dumps(message)), job_id, topic)


class Connection:
    """The hub's side of one socket. Small on purpose: a process holds thousands."""

    __slots__ = (
        "_sent",
        "_waiting",
        "address",
        "evicted",
        "limit",
        "player_id",
        "sink",
        "wrote_at",
    )

    def __init__(
        self, player_id: str, sink: FrameSink, address: str = "", limit: int = OUTBOX_BYTES
    ) -> None:
        self.player_id = player_id
        self.address = address
        self.sink = sink
        self.limit = limit
        self.evicted = False
        self.wrote_at = time.monotonic()
        self._waiting: list[Outgoing] | None = []  # held until the greeting is sent
        self._sent: OrderedDict[str, None] | None = None  # made on the first score

    def offer(self, message: Outgoing) -> bool:
        """Hand ``message`` to the socket without waiting; a socket too far behind is
        evicted (False)."""
        if self.evicted:
            return False
        if not self.first_time(message.job_id):
            return True  # already sent here: nothing to do, and nothing wrong
        if self._waiting is not None:
            if len(self._waiting) >= GREETING_BACKLOG:
                self.evict()
                return False
            self._waiting.append(message)
            return True
        return self._write(message.frame)

    def send_now(self, message: Outgoing) -> bool:
        """Write during the greeting, ahead of whatever the hub has queued meanwhile."""
        return self.first_time(message.job_id) and self._write(message.frame)

    def waiting_mark(self) -> int:
        """Where the frames waiting for the greeting end now (see :meth:`send_snapshot`)."""
        return len(self._waiting or ())

    def send_snapshot(self, message: Outgoing, mark: int) -> bool:
        """:meth:`send_now` for a whole-state message taken after :meth:`waiting_mark`
        returned ``mark``: the waiting frames of its topic from before ``mark`` are older
        than it, and those equal to it are already here, so neither is written."""
        if self._waiting:
            self._waiting = [
                m
                for i, m in enumerate(self._waiting)
                if m.topic != message.topic or (i >= mark and m.frame != message.frame)
            ]
        return self.send_now(message)

    def greeted(self) -> None:
        """The greeting is out: write what waited for it, then write straight through."""
        waiting, self._waiting = self._waiting, None
        for message in waiting or ():
            if not self._write(message.frame):
                return

    def evict(self) -> None:
        if not self.evicted:
            self.evicted = True
            self.sink.close_now(CLOSE_TOO_SLOW)

    def first_time(self, job_id: str | None) -> bool:
        """True the first time a job's score goes out on this socket (a resuming socket
        gets the replay and the live feed at once, and they overlap)."""
        if job_id is None:
            return True
        if self._sent is None:
            self._sent = OrderedDict()
        elif job_id in self._sent:
            return False
        self._sent[job_id] = None
        if len(self._sent) > SENT_IDS_KEPT:
            self._sent.popitem(last=False)
        return True

    def _write(self, frame: bytes) -> bool:
        if self.sink.buffered() > self.limit:
            self.evict()
            return False
        if not self.sink.write_frame(frame):
            return False
        self.wrote_at = time.monotonic()
        return True
