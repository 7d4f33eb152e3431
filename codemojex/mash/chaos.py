"""Chaos: every N seconds, kill a worker that is scoring, as a person on the admin page would.

The admin view's ``state``/``job_id`` come from the worker's last heartbeat (up to about a
second old), but ``lease_remaining_ms`` is read live from the queue: a worker whose reported
job still holds its lease is scoring it right now. Of those, the kill goes to the one with
the most lease left — the job claimed (or extended) most recently, with the most scoring
still ahead of it — so the order, which travels web → Valkey → worker, lands mid-score.

It can still land just after a score. What the kill caught is not guessed: a worker killed
by an order writes down the jobs it is scoring at that instant before it dies, and the
admin view lists them (``killed_holding``); :func:`settle` reads them back after the load.
A tick that finds no scoring worker within its interval passes without a kill. A killed
worker stays listed as alive and scoring until its heartbeat lapses (about 3 s), so workers
already killed are never aimed at again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, replace
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
    lease_remaining_ms: int  # that job's lease left when the kill was ordered
    # The jobs it was scoring when the kill landed, as it wrote them down; None until
    # settled, or if the worker could not write them (Valkey unreachable at that instant).
    held: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pick_victim(workers: list[dict[str, Any]], killed: set[str]) -> dict[str, Any] | None:
    """The alive worker scoring a still-leased job, the one with the most lease left."""
    scoring = [
        w
        for w in workers
        if w.get("alive")
        and w.get("state") == "scoring"
        and w.get("job_id")
        and w.get("lease_remaining_ms") is not None
        and w["worker_id"] not in killed
    ]
    return max(scoring, key=lambda w: int(w["lease_remaining_ms"]), default=None)


async def settle(api: GameApi, admin_token: str, kills: list[Kill]) -> list[Kill]:
    """``kills`` with ``held`` filled from the admin view: what each kill really caught."""
    if not kills:
        return kills
    holding = {w["worker_id"]: w.get("killed_holding") for w in await api.workers(admin_token)}
    return [replace(k, held=holding.get(k.worker_id)) for k in kills]


async def run_chaos(
    api: GameApi,
    admin_token: str,
    every_s: float,
    ledger: Ledger,
    kills: list[Kill],
    stop: asyncio.Event,
) -> None:
    """Until ``stop``: at most one kill per ``every_s`` seconds, appended to ``kills``."""
    due = every_s
    while not await pause(due - ledger.now(), stop):
        due += every_s
        while ledger.now() < due and not stop.is_set():
            try:
                workers = await api.workers(admin_token)
                victim = pick_victim(workers, {k.worker_id for k in kills})
                if victim is not None and await api.kill(admin_token, victim["worker_id"]) == 202:
                    kills.append(
                        Kill(
                            round(ledger.now(), 3),
                            victim["worker_id"],
                            victim["job_id"],
                            int(victim["lease_remaining_ms"]),
                        )
                    )
                    break
            except Exception as exc:  # noqa: BLE001 - chaos must not stop the load
                log.warning("chaos: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(POLL_S)
