"""``q.lanes``: fair lanes. Each lane is its own FIFO; claims take lanes round-robin.

Name the lane after whoever must not starve the others (a player, a tenant): a lane
with 100,000 jobs and a lane with one are served alternately.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codec import dumps, text
from .errors import DeadlinePassed, LaneFull
from .ids import job_id as mint_job_id
from .jobs import decode_batch
from .scripts import SCRIPTS
from .types import Claim, ClaimBatch, Enqueued

if TYPE_CHECKING:
    from .queue import Queue


class Lanes:
    def __init__(self, queue: Queue) -> None:
        self._q = queue
        self._keys = queue.keys

    async def enqueue(
        self, lane: str, payload: Any, *, job_id: str | None = None, max_attempts: int = 5
    ) -> str:
        """Append to ``lane``; an id that already exists is a no-op returning that id."""
        receipt = await self.submit(lane, payload, job_id=job_id, max_attempts=max_attempts)
        return receipt.job_id

    async def submit(
        self,
        lane: str,
        payload: Any,
        *,
        job_id: str | None = None,
        max_attempts: int = 5,
        max_pending: int = 0,
        deadline_ms: int = 0,
        seq_scope: str | None = None,
        attempts: int = 0,
    ) -> Enqueued:
        """Enqueue with admission checks, all in the one script that enqueues:

        * ``max_pending``: refuse with :class:`LaneFull` when the lane already holds that
          many unfinished jobs (pending, active or scheduled);
        * ``deadline_ms``: refuse with :class:`DeadlinePassed` at or after that server time;
        * ``seq_scope``: number the job 0, 1, 2 … within (lane, scope), fixed atomically
          with the enqueue, so refused or replayed submissions take no number.
        """
        if not lane:
            raise ValueError("lane must be a non-empty string")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        jid = job_id or mint_job_id()
        reply = await self._q.runner.run(
            SCRIPTS["lane_enqueue"],
            [
                self._keys.prefix,
                self._keys.job(jid),
                self._keys.lane(lane),
                self._keys.seq(lane, seq_scope or ""),
            ],
            [
                jid,
                lane,
                dumps(payload),
                max_attempts,
                max(0, max_pending),
                max(0, deadline_ms),
                1 if seq_scope is not None else 0,
                self._q.settings.seq_ttl_ms,
                attempts,
            ],
        )
        code = int(reply[0])
        if code == -1:
            raise LaneFull(lane, int(reply[1]))
        if code == -2:
            raise DeadlinePassed(deadline_ms, int(reply[1]))
        seq = int(reply[2])
        return Enqueued(text(reply[1]), None if seq < 0 else seq, code == 1)

    async def claim(self, worker_id: str, lease_ms: int) -> Claim | None:
        """Lease the oldest job of the next non-empty lane, round-robin."""
        batch = await self.claim_many(worker_id, lease_ms, 1)
        return batch.claims[0] if batch.claims else None

    async def claim_many(self, worker_id: str, lease_ms: int, count: int) -> ClaimBatch:
        return decode_batch(
            await self._q.runner.run(
                SCRIPTS["lane_claim"],
                [self._keys.prefix],
                [worker_id, lease_ms, count, self._q.settings.promote_limit],
            )
        )

    async def depth(self, lane: str) -> int:
        """Jobs waiting on ``lane`` (not counting the active or scheduled ones)."""
        return int(await self._q.conn.zcard(self._keys.lane(lane)))

    async def load(self, lane: str) -> int:
        """Unfinished jobs of ``lane``: pending + active + scheduled (what max_pending caps)."""
        raw = await self._q.conn.hget(self._keys.lane_load, lane)
        return int(raw) if raw else 0
