"""``Outcomes``: a job's complete, fail or release under its token, each retried for a
lease from its first error, then left to the reaper (a late call would only be stale);
the hand-backs of jobs the consumer will not run; and the consumer's counts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

from ..backoff import Backoff
from ..codec import text
from ..errors import Retry
from ..hooks import HookChain
from ..jobs import HandBack
from ..queue import Queue
from ..types import Claim
from .claims import ClaimTracker, Key, key_of
from .outbox import Outbox
from .trouble import Trouble

log = logging.getLogger("echomq.consumer")

T = TypeVar("T")


class ResultNotEncodable(TypeError):
    """The handler returned a value JSON cannot carry: its job fails."""


class HandlerCancelled(Exception):
    """The handler was cancelled by something other than this consumer: a failed attempt."""


class TimedOut(Exception):
    """The handler ran past ``timeout_ms``: cancelled, and its job failed."""


@dataclass(slots=True)
class Counts:
    """What a consumer did, for tests and for the worker's self-description."""

    completed: int = 0
    failed: int = 0
    stale: int = 0
    lost: int = 0
    released: int = 0
    timed_out: int = 0  # handlers cancelled after timeout_ms (each also in failed)
    unavailable: int = 0  # jobs handed back because a dependency was down

    @classmethod
    def total(cls, many: Iterable[Counts]) -> Counts:
        """The counts of ``many`` consumers, summed."""
        out = cls()
        for counts in many:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(counts, f.name))
        return out


class Outcomes:
    """Sends outcomes for ``worker_id``: completions through ``outbox``, the rest
    directly; ``hooks()`` is the hook chain in force."""

    def __init__(
        self,
        queue: Queue,
        tracker: ClaimTracker,
        lease_ms: int,
        worker_id: str,
        hooks: Callable[[], HookChain],
        counts: Counts,
    ) -> None:
        self.queue = queue
        self.tracker = tracker
        self.lease_ms = lease_ms
        self.worker_id = worker_id
        self.hooks = hooks
        self.counts = counts
        self.outbox = Outbox(
            lambda items: self.hooks().complete(items, self.queue.jobs.complete_encoded),
            self.give_up,
        )

    def give_up(self, key: Key) -> bool:
        return self.tracker.give_up(key, asyncio.get_running_loop().time(), self.lease_ms / 1000)

    async def _within_lease(
        self, claim: Claim, what: str, failing: str, call: Callable[[], Awaitable[T]]
    ) -> tuple[bool, T | None]:
        """``call()`` retried on errors: ``(True, its answer)``, or ``(False, None)`` once
        given up (counted stale)."""
        key = key_of(claim)
        backoff = Backoff(first=0.1)
        trouble = Trouble(f"{what} of {claim.job_id}")
        try:
            while True:
                try:
                    return True, await call()
                except Exception as e:  # noqa: BLE001 - any error: retry within the lease
                    if self.give_up(key):
                        log.warning(
                            "job %s: could not %s within its lease (%s); left to the reaper",
                            claim.job_id,
                            failing,
                            e,
                        )
                        self.counts.stale += 1
                        return False, None
                    trouble.note(e)
                    await backoff.sleep()
        finally:
            self.tracker.settled(key)

    def complete_soon(self, claim: Claim, encoded: bytes, then: Callable[[Claim], None]) -> None:
        """Complete ``claim`` through the outbox without waiting; ``then(claim)`` once its
        verdict is in."""
        key = key_of(claim)
        self.tracker.finish(key)
        fut = self.outbox.complete_soon(claim.job_id, claim.token, encoded)

        def verdict(done: asyncio.Future[bool]) -> None:
            self.tracker.settled(key)
            if not done.cancelled():
                if done.result():
                    self.counts.completed += 1
                else:
                    self.counts.stale += 1
            then(claim)

        fut.add_done_callback(verdict)

    async def release(self, claim: Claim) -> bool:
        """Hand ``claim`` back (no delivery spent); True once released."""
        self.tracker.finish(key_of(claim))
        sent, ok = await self._within_lease(
            claim,
            "release",
            "hand it back",
            lambda: self.queue.jobs.release(claim.job_id, claim.token),
        )
        if not sent:
            return False
        if ok:
            self.counts.released += 1
        else:
            self.counts.stale += 1
        await self.hooks().released(claim, bool(ok))
        return bool(ok)

    async def hand_back(self, claim: Claim, bound: int) -> HandBack | None:
        """``release`` for a handler that raised ``Unavailable``; ``"exhausted"``: still
        held, fail it; None once given up."""
        self.tracker.finish(key_of(claim))
        sent, verdict = await self._within_lease(
            claim,
            "release",
            "hand it back",
            lambda: self.queue.jobs.hand_back(claim.job_id, claim.token, bound),
        )
        if not sent or verdict == "exhausted":
            return verdict
        if verdict == "released":
            self.counts.released += 1
        else:
            self.counts.stale += 1
        await self.hooks().released(claim, verdict == "released")
        return verdict

    async def release_once(self, claim: Claim) -> None:
        try:
            ok = await self.queue.jobs.release(claim.job_id, claim.token)
        except Exception as e:  # noqa: BLE001 - best effort: the lease runs out instead
            log.warning("release of %s failed (%s); its lease will run out", claim.job_id, e)
            return
        if ok:
            self.counts.released += 1
        await self.hooks().released(claim, ok)

    async def release_suspects(self, extra: Sequence[Claim]) -> bool:
        """Hand back the suspects beyond the one kept, together; True if a release erred
        (one may still be leased to us)."""
        done = await asyncio.gather(
            *(self.queue.jobs.release(c.job_id, c.token) for c in extra),
            return_exceptions=True,
        )
        self.counts.released += sum(1 for ok in done if ok is True)
        for claim, ok in zip(extra, done, strict=True):
            if isinstance(ok, bool):
                await self.hooks().released(claim, ok)
        return any(isinstance(ok, BaseException) for ok in done)

    async def release_orphans(self, known: set[str]) -> None:
        """Hand back the jobs the server says we hold and ``known`` does not: a claim whose
        answer was lost leased them. Left to lapse they would count as stalls, and, back at
        the front of their lane, be taken by the next broken claim until dead."""
        conn = self.queue.conn
        ids = [text(x) for x in await conn.smembers(self.queue.keys.worker_jobs(self.worker_id))]
        for job_id in ids:
            if job_id in known:
                continue
            # The row's token may be someone else's by now: the release names us as holder.
            token = await conn.hget(self.queue.keys.job(job_id), "attempts")
            if token is not None and await self.queue.jobs.release(
                job_id, int(token), worker_id=self.worker_id
            ):
                self.counts.released += 1
                log.info("released %s, leased to us by a claim whose answer was lost", job_id)

    async def fail(self, claim: Claim, error: BaseException) -> None:
        self.tracker.finish(key_of(claim))
        retry_in = error.delay_ms if isinstance(error, Retry) else None
        if isinstance(retry_in, bool) or not isinstance(retry_in, int) or retry_in < 0:
            retry_in = None  # a nonsense delay asked for: the default backoff
        message = "timed out" if isinstance(error, TimedOut) else f"{type(error).__name__}: {error}"
        message = message[:2000]
        sent, outcome = await self._within_lease(
            claim,
            "fail",
            "record its failure",
            lambda: self.queue.jobs.fail(claim.job_id, claim.token, message, retry_in),
        )
        if not sent or outcome is None:
            return
        if outcome == "stale":
            self.counts.stale += 1
        else:
            self.counts.failed += 1
        await self.hooks().failed(claim, error, outcome)
        # "dead" is the one an operator must act on.
        log.log(
            logging.WARNING if outcome == "dead" else logging.INFO,
            "job %s failed (%s): %s",
            claim.job_id,
            outcome,
            message,
            extra={"job_id": claim.job_id, "worker_id": self.worker_id},
        )
