"""``q.stalled``: the reaper (EchoMQ's ``Stalled``).

A job whose holder is presumed dead — its lease deadline passed, or its worker's
heartbeat lapsed — goes back to its lane (or to ``dead`` when out of deliveries). Both
are judged on the server clock inside the script, so a client with a wrong clock reaps
exactly what a client with a right one would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .codec import text
from .scripts import SCRIPTS

if TYPE_CHECKING:
    from .queue import Queue


class Stalled:
    def __init__(self, queue: Queue) -> None:
        self._q = queue

    async def reap(self, limit: int = 100) -> list[str]:
        """Move up to ``limit`` expired leases (and the jobs of up to ``limit`` lapsed
        workers) back to their lanes; returns every id moved."""
        reply = await self._q.runner.run(
            SCRIPTS["reap"], [self._q.keys.prefix], [limit, self._q.settings.events_maxlen]
        )
        return [text(x) for x in reply]
