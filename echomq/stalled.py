"""``q.stalled``: the reaper. A job whose lease passed or whose worker's heartbeat lapsed
goes back to its lane (or to ``dead``), judged on the server clock inside the script."""

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
    """One reaper turn: did it hold the lock, which jobs it moved, and the ms until the next
    turn can matter (the earliest deadline as leader, else until the lock may free up)."""

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
        """``reap`` as the queue's one reaper, only while holding (or on taking) the lock
        ``SET NX PX lock_ms``; ``horizon_ms`` caps the wait reported.

        ``gap_ms`` > 0 detects outages (lua/include/pulse.lua): the first call or beat after
        a server silence longer than ``gap_ms`` gives every holder ``horizon_ms`` to show
        it is alive and charges no stall. Without it, ``margin_ms`` > 0 means
        ``gap_ms = horizon_ms + margin_ms``."""
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
    """The longest server silence a live queue can leave: halfway between the reap interval
    (a live queue calls at least that often) and lapse - heartbeat (the shortest freeze
    that can carry a live worker past its deadline). Longer is an outage."""
    return max(1, (lapse_ms - heartbeat_ms + reap_interval_ms) // 2)
