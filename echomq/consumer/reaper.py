"""``Reaper``: the queue's one reaper, elected on the server; ``ReaperSeats``: one reaper
loop per queue among the consumers of one event loop.

The election is a lock on the server clock (``Stalled.sweep``: ``SET NX PX``): one
consumer in the whole deployment reaps a queue at a time, and every other stands ready to
take over. Inside one process there is no point in several consumers of the same queue
all asking for that lock, so the first consumer of a queue to start on an event loop
takes the queue's seat and hosts the reaper loop; the seat is freed when it stops, for
the next one to start.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref

from ..queue import Queue
from .options import ConsumerOptions
from .trouble import Trouble
from .waits import pause

log = logging.getLogger("echomq.consumer")


class ReaperSeats:
    """Which queues already have a reaper loop among the consumers of one event loop."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, queue: str) -> bool:
        """Take ``queue``'s seat; False if another consumer holds it."""
        if queue in self._taken:
            return False
        self._taken.add(queue)
        return True

    def leave(self, queue: str) -> None:
        """Free ``queue``'s seat (a no-op if it was free)."""
        self._taken.discard(queue)

    def __contains__(self, queue: object) -> bool:
        return queue in self._taken


# The seats of each event loop, dropped with the loop: state that belongs to the loop the
# consumers run on, so a loop that ends (a test's, a thread's) takes its seats with it.
_SEATS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReaperSeats] = (
    weakref.WeakKeyDictionary()
)


def seats() -> ReaperSeats:
    """The reaper seats of the running event loop."""
    loop = asyncio.get_running_loop()
    found = _SEATS.get(loop)
    if found is None:
        found = _SEATS[loop] = ReaperSeats()
    return found


class Reaper:
    """Takes part in ``queue``'s reaper election for ``options.worker_id`` until
    ``closing`` is set, and reaps while it holds the lock. ``kick`` is set when a turn
    moved jobs, so that the consumer hosting it claims at once instead of parking."""

    def __init__(
        self,
        queue: Queue,
        options: ConsumerOptions,
        closing: asyncio.Event,
        kick: asyncio.Event,
    ) -> None:
        self.queue = queue
        self.options = options
        self.closing = closing
        self.kick = kick

    async def turn(self) -> float:
        """One turn (ask for the lock, reap if it is ours); returns the pause in ms
        before the next one."""
        o = self.options
        sweep = await self.queue.stalled.sweep(
            o.worker_id,
            o.reap_lock_ms,
            horizon_ms=o.lapse_ms,
            margin_ms=o.reap_interval_ms,
            gap_ms=o.pulse_gap_ms,
        )
        for job_id in sweep.moved:
            log.info("reaped %s: its holder was presumed dead", job_id, extra={"job_id": job_id})
        if sweep.moved:
            # The jobs are back on their lanes and their wake token is on the wake key,
            # but the consumer parked longest may be the very holder presumed dead: a
            # frozen (SIGSTOPped, paused) process keeps its BLPOP registered and swallows
            # the token, leaving the live ones parked until park_max_ms. So the consumer
            # that hosts the reaper claims at once.
            self.kick.set()
        if sweep.leader:
            # The jitter only makes a turn earlier; +2 ms: land past the deadline.
            return max(
                o.reap_interval_ms * random.uniform(0.8, 1.0),
                min(sweep.wait_ms + 2, o.lapse_ms),
            )
        return max(10, sweep.wait_ms) + random.uniform(1, 20)

    async def run(self) -> None:
        """Turns until ``closing`` is set.

        As holder it reaps when something can next come due (the earliest lease
        deadline, heartbeat deadline or due time), never more often than
        ``reap_interval_ms`` and never later than ``lapse_ms`` after the last turn (a
        job claimed meanwhile comes due no sooner than its holder's lapse). So the bound
        on a dead holder's job is unchanged, its deadline + ``reap_interval_ms``, while
        an idle queue is reaped once per lapse. Others try again when the lock may free
        up, so a dead holder is replaced within ``reap_lock_ms``."""
        loop = asyncio.get_running_loop()
        trouble = Trouble("reaper")
        while not self.closing.is_set():
            started = loop.time()
            try:
                pause_ms = await self.turn()
                trouble.ok()
            except Exception as e:  # noqa: BLE001 - any error: try again next interval
                trouble.note(e)
                pause_ms = self.options.reap_interval_ms
            await pause(pause_ms / 1000 - (loop.time() - started), self.closing)
