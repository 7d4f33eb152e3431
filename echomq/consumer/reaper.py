"""``Reaper``: the queue's one reaper, elected under a lock on the server clock;
``ReaperSeats``: one reaper loop per queue among the consumers of one event loop, since
several in one process asking for the same lock would gain nothing."""

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
    def __init__(self) -> None:
        self._taken: set[str] = set()

    def take(self, queue: str) -> bool:
        if queue in self._taken:
            return False
        self._taken.add(queue)
        return True

    def leave(self, queue: str) -> None:
        self._taken.discard(queue)

    def __contains__(self, queue: object) -> bool:
        return queue in self._taken


# Dropped with their loop: a loop that ends (a test's, a thread's) takes its seats along.
_SEATS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ReaperSeats] = (
    weakref.WeakKeyDictionary()
)


def seats() -> ReaperSeats:
    loop = asyncio.get_running_loop()
    found = _SEATS.get(loop)
    if found is None:
        found = _SEATS[loop] = ReaperSeats()
    return found


class Reaper:
    """Takes part in ``queue``'s reaper election until ``closing``, reaping while it holds
    the lock; sets ``kick`` when a turn moved jobs."""

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
        """Ask for the lock, reap if it is ours; the pause in ms before the next turn."""
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
            # The consumer parked longest may be the frozen holder presumed dead, whose
            # BLPOP would swallow the wake token: the host of the reaper claims at once.
            self.kick.set()
        if sweep.leader:
            # The jitter only makes a turn earlier; +2 ms: land past the deadline.
            return max(
                o.reap_interval_ms * random.uniform(0.8, 1.0),
                min(sweep.wait_ms + 2, o.lapse_ms),
            )
        return max(10, sweep.wait_ms) + random.uniform(1, 20)

    async def run(self) -> None:
        """Turns until ``closing``: as holder when something can next come due, at least
        ``reap_interval_ms`` and at most ``lapse_ms`` apart (a job claimed meanwhile comes
        due no sooner than its holder's lapse); others when the lock may free up."""
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
