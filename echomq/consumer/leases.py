"""``LeaseKeeper``: renews the leases of the jobs a consumer holds, and notices lost ones.

One pass (about every third of ``lease_ms``) extends every held claim but those whose
outcome is on its way, in one pipelined call. A refused extend means the lease went to
someone else (the reaper took the job): the claim is lost, and its handler is cancelled
at once so that a stale attempt's side effects stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..hooks import HookChain
from ..queue import Queue
from .claims import READY, RUNNING, ClaimRecord, ClaimTracker, key_of

log = logging.getLogger("echomq.consumer")


class LeaseKeeper:
    """Renews ``tracker``'s leases on ``queue``. ``on_lost(record)`` is called for each
    claim found lost (the consumer counts it and cancels its handler); ``hooks()`` is the hook chain
    in force (read at each pass: the consumer builds it anew when it starts)."""

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
        """One pass: extend the held leases and lose the claims whose extend was refused."""
        # Ready and running jobs, and finished ones whose outcome is stuck on errors
        # (their verdicts never count as lost: the outcome itself may just have landed).
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
                log.warning("lease of %s lost; handler cancelled", record.claim.job_id)
