"""``q.stalled``: the reaper (EchoMQ's ``Stalled``).

A job whose holder is presumed dead — its lease deadline passed, or its worker's
heartbeat lapsed — goes back to its lane (or to ``dead`` when out of deliveries). Both
are judged on the server clock inside the script, so a client with a wrong clock reaps
exactly what a client with a right one would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import checks
from .codec import text
from .scripts import SCRIPTS

if TYPE_CHECKING:
    from .queue import Queue


@dataclass(frozen=True, slots=True)
class Sweep:
    """One turn of a consumer's reaper: did it hold the queue's reaper lock, which jobs it
    moved, and how long until the next turn can matter (ms): as leader, until the earliest
    lease deadline, heartbeat deadline or due time; otherwise until the lock may free up."""

    leader: bool
    moved: list[str]
    wait_ms: int


class Stalled:
    def __init__(self, queue: Queue) -> None:
        self._q = queue

    async def reap(self, limit: int = 100) -> list[str]:
        """Move up to ``limit`` expired leases (and the jobs of up to ``limit`` lapsed
        workers) back to their lanes; returns every id moved."""
        checks.integer("limit", limit, at_least=1)
        return (await self._sweep(limit, "", 0, 0)).moved

    async def sweep(
        self,
        reaper_id: str,
        lock_ms: int,
        horizon_ms: int,
        limit: int = 100,
        *,
        margin_ms: int = 0,
    ) -> Sweep:
        """``reap`` as the queue's one reaper: only while holding (or on taking) the
        reaper lock ``SET NX PX lock_ms``; another holder's turn changes nothing.
        ``horizon_ms`` caps the wait reported (a job claimed later can come due no sooner
        than its holder's heartbeat lapse). With ``margin_ms`` > 0, a gap since the queue's
        last sweep longer than a live queue leaves (``horizon_ms`` for the same holder,
        ``lock_ms`` for a successor, + ``margin_ms``) is an outage: every holder first
        gets ``horizon_ms`` to show it is alive, and no stall is charged for the outage
        (reap.lua)."""
        checks.name("reaper_id", reaper_id)
        checks.integer("lock_ms", lock_ms, at_least=1)
        checks.integer("horizon_ms", horizon_ms, at_least=0)
        checks.integer("limit", limit, at_least=1)
        checks.integer("margin_ms", margin_ms, at_least=0)
        return await self._sweep(limit, reaper_id, lock_ms, horizon_ms, margin_ms)

    async def _sweep(
        self, limit: int, reaper_id: str, lock_ms: int, horizon_ms: int, margin_ms: int = 0
    ) -> Sweep:
        reply = await self._q.runner.run(
            SCRIPTS["reap"],
            [self._q.keys.prefix],
            [limit, self._q.settings.events_maxlen, reaper_id, lock_ms, horizon_ms, margin_ms],
        )
        return Sweep(bool(int(reply[0])), [text(x) for x in reply[2:]], int(reply[1]))
