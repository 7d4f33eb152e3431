"""Chaos: every N seconds, kill a worker that is scoring, as a person on the admin page would.

The admin view's ``state``/``job_id`` come from the worker's last heartbeat (up to about a
second old), but ``lease_remaining_ms`` is read live from the queue: a worker whose reported
job still holds its lease is scoring it right now. Of those, the kill goes to the one whose
job this script saw reported most recently, which has had the least time to finish since.

A kill can still arrive just after the job's score (the order travels web → Valkey →
worker); the verdict tells those apart: the job ends ``completed`` with ``attempts == 1``,
scored by the worker before it died (a miss), where a caught job ends with ``attempts ≥ 2``.
A tick that finds no scoring worker within its interval passes without a kill. A killed
worker stays listed as alive and scoring until its heartbeat lapses (about 3 s), so workers
already killed are never aimed at again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from typing import Any

from codemojex.mash.api import GameApi
from codemojex.mash.ledger import Ledger
from codemojex.mash.players import pause

log = logging.getLogger("codemojex.mash.chaos")

POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Kill:
    at: float  # seconds since the load started
    worker_id: str
    job_id: str | None  # the job it was scoring, per the admin view
    seen_for_ms: int  # how long that job had been reported when the kill was ordered

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pick_victim(workers: list[dict[str, Any]], first_seen: dict[str, float],
                killed: set[str]) -> dict[str, Any] | None:
    """The alive worker scoring a still-leased job, the most recently reported one first."""
    scoring = [w for w in workers
               if w.get("alive") and w.get("state") == "scoring" and w.get("job_id")
               and w.get("lease_remaining_ms") is not None and w["worker_id"] not in killed]
    return max(scoring, key=lambda w: first_seen.get(w["job_id"], 0.0), default=None)


async def run_chaos(api: GameApi, admin_token: str, every_s: float, ledger: Ledger,
                    kills: list[Kill], stop: asyncio.Event) -> None:
    """Until ``stop``: at most one kill per ``every_s`` seconds, appended to ``kills``."""
    first_seen: dict[str, float] = {}
    due = every_s
    while not await pause(due - ledger.now(), stop):
        due += every_s
        while ledger.now() < due and not stop.is_set():
            try:
                workers = await api.workers(admin_token)
                now = ledger.now()
                for w in workers:
                    if w.get("job_id"):
                        first_seen.setdefault(w["job_id"], now)
                victim = pick_victim(workers, first_seen, {k.worker_id for k in kills})
                if victim is not None and await api.kill(admin_token, victim["worker_id"]) == 202:
                    seen = int((ledger.now() - first_seen[victim["job_id"]]) * 1000)
                    kills.append(Kill(round(ledger.now(), 3), victim["worker_id"],
                                      victim["job_id"], seen))
                    break
            except Exception as exc:  # noqa: BLE001 - chaos must not stop the load
                log.warning("chaos: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(POLL_S)
