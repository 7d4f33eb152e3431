"""Queue depth over time: ``GET /api/admin/queue`` once a second (needs the admin token)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from typing import Any

from codemojex.mash.api import GameApi
from codemojex.mash.ledger import Ledger

log = logging.getLogger("codemojex.mash.monitor")

INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class QueueSample:
    at: float  # seconds since the load started
    pending: int
    active: int
    scheduled: int
    lanes: int  # non-empty lanes
    accepted: int  # the server's counters, all-time
    scored: int
    reclaimed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def watch_queue(
    api: GameApi, admin_token: str, ledger: Ledger, samples: list[QueueSample]
) -> None:
    """Append a sample every second until cancelled."""
    while True:
        try:
            q = await api.queue(admin_token)
            c = q.get("counters", {})
            samples.append(
                QueueSample(
                    round(ledger.now(), 3),
                    int(q["pending"]),
                    int(q["active"]),
                    int(q["scheduled"]),
                    sum(1 for lane in q["lanes"] if lane["depth"]),
                    int(c.get("accepted", 0)),
                    int(c.get("scored", 0)),
                    int(c.get("reclaimed", 0)),
                )
            )
        except Exception as exc:  # noqa: BLE001 - a missed sample is a gap in a plot
            log.warning("queue sample: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(INTERVAL_S)
