"""``LeaseKeeper``: renews the leases a consumer holds in one pipelined call; a refused
extend loses the claim (reclaimed, or its job cancelled: either way no longer active), and
its handler is cancelled so a stale attempt's effects stop and no outcome is recorded."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..hooks import HookChain
from ..queue import Queue
from .claims import READY, RUNNING, ClaimRecord, ClaimTracker, key_of

log = logging.getLogger("echomq.consumer")


class LeaseKeeper:
    """Renews ``tracker``'s leases; ``on_lost(record)`` for each claim found lost."""

    def __init__(
        self,
        queue: Queue,
        tracker: ClaimTracker,
        lease_ms: int,
        on_lost: Callable[[ClaimRecord], None],
        hooks: Callable[[], HookChain],
    ) -> None:
        self.queue = queue
        self.tracker = tracker
        self.lease_ms = lease_ms
        self.on_lost = on_lost
        self.hooks = hooks

    async def renew(self) -> None:
        # A stuck outcome's refused extend is no loss: the outcome may just have landed.
        held = self.tracker.renewable()
        if not held:
            return
        claims = [r.claim for r in held]
        verdicts = await self.queue.jobs.extend_many(
            [(c.job_id, c.token) for c in claims], self.lease_ms
        )
        await self.hooks().extended(claims, verdicts)
        for record, ok in zip(held, verdicts, strict=True):
            if (
                not ok
                and record.state in (READY, RUNNING)
                and self.tracker.get(key_of(record.claim)) is record
            ):
                self.on_lost(record)
                log.warning(
                    "lease of %s lost (reclaimed or cancelled); handler cancelled",
                    record.claim.job_id,
                )
