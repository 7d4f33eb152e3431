"""``Heartbeat``: a consumer's beats into the worker registry: every ``heartbeat_ms`` on
the short lapse while it holds jobs, rarer on the idle lapse while nothing waits on its
death."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from ..queue import Queue
from .options import ConsumerOptions
from .trouble import Trouble
from .waits import pause, wait_any


class Heartbeat:
    """Beats until ``closing``; ``describe()`` is the row, ``holding()`` whether jobs are
    held; setting ``busy`` brings the next beat now, at the busy cadence."""

    def __init__(
        self,
        queue: Queue,
        options: ConsumerOptions,
        describe: Callable[[], dict[str, Any]],
        holding: Callable[[], bool],
        closing: asyncio.Event,
    ) -> None:
        self.queue = queue
        self.options = options
        self.describe = describe
        self.holding = holding
        self.closing = closing
        self.busy = asyncio.Event()

    async def beat(self) -> int:
        """One beat; the lapse the server applied."""
        o = self.options
        _, applied = await self.queue.beat(
            o.worker_id,
            o.lapse_ms,
            self.describe(),
            idle_lapse_ms=o.idle_lapse_ms,
            gap_ms=o.pulse_gap_ms,
        )
        return applied

    async def run(self) -> None:
        o = self.options
        loop = asyncio.get_running_loop()
        trouble = Trouble("heartbeat")
        while not self.closing.is_set():
            started = loop.time()
            interval = o.heartbeat_ms
            self.busy.clear()
            try:
                applied = await self.beat()
                trouble.ok()
                if applied > o.lapse_ms and not self.holding():
                    interval = o.idle_heartbeat_ms
            except Exception as e:  # noqa: BLE001 - any error: beat again soon
                trouble.note(e)
            left = interval / 1000 * random.uniform(0.8, 1.0) - (loop.time() - started)
            if interval > o.heartbeat_ms:
                woken = await wait_any(left, self.closing, self.busy)
                if self.busy.is_set():
                    left = o.heartbeat_ms / 1000 * random.uniform(0.8, 1.0) - woken
                else:
                    continue
            await pause(left, self.closing)
