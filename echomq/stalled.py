"""``q.stalled``: the reaper (EchoMQ's ``Stalled``).

A job whose holder is presumed dead — its lease deadline passed, or its worker's
heartbeat lapsed — goes back to its lane (or to ``dead`` when out of deliveries). Both
are judged on the server clock inside the script, so a client with a wrong clock reaps
exactly what a client with a right one would. A deadline that passed while the server
itself was silent (frozen, down) is not held against anyone: see ``sweep``'s ``gap_ms``
and lua/include/pulse.lua.
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
        gap_ms: int | None = None,
    ) -> Sweep:
        """``reap`` as the queue's one reaper: only while holding (or on taking) the
        reaper lock ``SET NX PX lock_ms``; another holder's turn reaps nothing.
        ``horizon_ms`` caps the wait reported (a job claimed later can come due no sooner
        than its holder's heartbeat lapse).

        ``gap_ms`` > 0 is outage detection (lua/include/pulse.lua): every call, a
        non-holder's too, and every beat made with the same ``gap_ms`` record the server
        time they ran at; the first of them after a silence longer than ``gap_ms`` gives
        every holder ``horizon_ms`` from then to show it is alive before anyone is
        judged, and charges no stall for the silence. While anything is active, the wait
        reported is at most ``gap_ms / 2``, so a live queue never falls silent that long.
        Sound when ``gap_ms`` < lapse - heartbeat interval (``pulse_gap_ms``). Without
        ``gap_ms``, ``margin_ms`` > 0 means ``gap_ms = horizon_ms + margin_ms``."""
        checks.name("reaper_id", reaper_id)
        checks.integer("lock_ms", lock_ms, at_least=1)
        checks.integer("horizon_ms", horizon_ms, at_least=0)
        checks.integer("limit", limit, at_least=1)
        checks.integer("margin_ms", margin_ms, at_least=0)
        if gap_ms is None:
            gap_ms = horizon_ms + margin_ms if margin_ms > 0 else 0
        checks.integer("gap_ms", gap_ms, at_least=0)
        return await self._sweep(limit, reaper_id, lock_ms, horizon_ms, margin_ms, gap_ms)

    async def _sweep(
        self,
        limit: int,
        reaper_id: str,
        lock_ms: int,
        horizon_ms: int,
        margin_ms: int = 0,
        gap_ms: int = 0,
    ) -> Sweep:
        reply = await self._q.runner.run(
            SCRIPTS["reap"],
            self._q.keys.script_keys("reap"),
            [
                limit,
                self._q.settings.events_maxlen,
                reaper_id,
                lock_ms,
                horizon_ms,
                margin_ms,
                gap_ms,
            ],
        )
        return Sweep(bool(int(reply[0])), [text(x) for x in reply[2:]], int(reply[1]))


def pulse_gap_ms(lapse_ms: int, heartbeat_ms: int, reap_interval_ms: int) -> int:
    """The longest silence of the server a live queue can leave: halfway between the
    reap interval (a live queue's reaper and its stand-ins call at least that often while
    anything is active) and lapse - heartbeat (the shortest freeze that can carry a live
    worker's heartbeat deadline past before its queued beat lands). Every freeze longer
    than it is an outage; every shorter one leaves a live holder's deadline ahead of the
    burst of commands queued during it. Needs reap_interval_ms < lapse_ms - heartbeat_ms
    to leave room on both sides."""
    return max(1, (lapse_ms - heartbeat_ms + reap_interval_ms) // 2)
