"""``Scheduler``: a consumer's part in running its queue's schedules (``q.schedules``).

Every consumer process stands ready, as for reaping (one scheduler per queue per event
loop: it runs beside the reaper seat). At the earliest next due time each fires what is
due; the tick script lets one of them enqueue a tick and refuses the others, so running
more schedulers costs refused calls, never a second job. Between ticks it sleeps on the
event loop's timer (precise to the millisecond), and a BLPOP on the schedulers' wake key,
at most ``park_max_ms`` long, hears of a schedule added or resumed that may be due sooner:
an idle consumer sends two commands per ``park_max_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..queue import Queue
from .options import ConsumerOptions
from .park import blocking_twin
from .trouble import Trouble
from .waits import pause, wait_any

log = logging.getLogger("echomq.consumer")


class Scheduler:
    """Fires ``queue``'s due ticks until ``closing``."""

    def __init__(self, queue: Queue, options: ConsumerOptions, closing: asyncio.Event) -> None:
        self.queue = queue
        self.options = options
        self.closing = closing
        self.kick = asyncio.Event()

    async def turn(self) -> float:
        """Fire what is due; the ms until the next turn can matter."""
        horizon = self.options.park_max_ms
        turn = await self.queue.schedules.run_due()
        if turn.fired:
            log.debug("scheduler fired %d ticks", turn.fired)
        return horizon if turn.wait_ms is None else min(turn.wait_ms, horizon)

    async def run(self) -> None:
        """Turns until ``closing``, waiting between them for the earliest due time or a
        kick from the wake key."""
        listener = asyncio.create_task(self._listen(), name="scheduler-wake")
        trouble = Trouble("scheduler")
        try:
            while not self.closing.is_set():
                self.kick.clear()
                try:
                    wait_ms = await self.turn()
                    trouble.ok()
                except Exception as e:  # noqa: BLE001 - any error: try again next interval
                    trouble.note(e)
                    wait_ms = self.options.reap_interval_ms
                if wait_ms > 0:
                    await wait_any(wait_ms / 1000, self.kick, self.closing)
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def _listen(self) -> None:
        """Set ``kick`` for each token on the wake key; one BLPOP of at most
        ``park_max_ms`` at a time, on a connection of its own."""
        key = self.queue.keys.sched_wake
        twin: Any = None
        trouble = Trouble("scheduler-wake")
        try:
            while not self.closing.is_set():
                try:
                    if twin is None:
                        twin = await blocking_twin(self.queue.conn, key)
                    got = await twin.blpop([key], timeout=self.options.park_max_ms / 1000)
                    trouble.ok()
                except Exception as e:  # noqa: BLE001 - a lost connection: build it anew
                    trouble.note(e)
                    if twin is not None:
                        with contextlib.suppress(Exception):
                            await twin.aclose()
                    twin = None
                    await pause(self.options.reap_interval_ms / 1000, self.closing)
                    continue
                if got:
                    self.kick.set()
        finally:
            if twin is not None:
                with contextlib.suppress(Exception):
                    await twin.aclose()
