"""``ClaimTracker``: what a consumer holds, one record and one state per claim.

A claim is keyed by ``(job_id, attempts, lease)`` (:data:`Key`), not by job id: after a
lost lease the same job can come back to the very same consumer under a new token while
the old attempt still unwinds, and after data loss (a claim lost with an ``everysec``
crash) under the same ``attempts`` with another lease id, which a :class:`~echomq.Token`
alone would not tell apart: it hashes and compares as its int. Its life inside the
consumer::

    READY ──> RUNNING ──> FINISHING <──> STUCK
      │  └───────┬──────────┘ │            │
      └──────────┴──> LOST <──┴────────────┘        (any state) ──> forgotten

- ``READY``: claimed, its handler not started (prefetched, or waiting for a slot).
- ``RUNNING``: its handler started.
- ``FINISHING``: its outcome (complete, fail or release) is queued or in flight; the lease
  keeper leaves it alone, since an extend racing the outcome on another connection would
  be refused for a lease that was simply finished.
- ``STUCK``: its outcome met an error and is being retried until ``give_up_at``, a lease
  after its first error; the lease keeper renews it meanwhile, so an outcome that gets
  through in that time still counts, but no renewal moves ``give_up_at``: an outcome the
  server refuses every time is given up, and its job left to the reaper.
- ``LOST``: the lease is gone (an extend said so, or a stop's grace ran out): nothing of
  ours counts any more. A lost claim stays lost until it is forgotten.

The tracker is pure bookkeeping, no I/O: the consumer's parts change a claim's state only
through its methods, which refuse an illegal move with :class:`IllegalTransition`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..types import Claim, lease_of

#: A held claim: ``(job_id, attempts, lease id)``.
Key = tuple[str, int, str]


def key_for(job_id: str, token: int) -> Key:
    """The tracker's key of ``job_id`` held under ``token``."""
    return (job_id, int(token), lease_of(token))


def key_of(claim: Claim) -> Key:
    """The tracker's key of ``claim``."""
    return key_for(claim.job_id, claim.token)


class ClaimState(enum.Enum):
    """Where a held claim is in its life inside the consumer."""

    READY = "ready"
    RUNNING = "running"
    FINISHING = "finishing"
    STUCK = "stuck"
    LOST = "lost"


READY, RUNNING, FINISHING, STUCK, LOST = (
    ClaimState.READY,
    ClaimState.RUNNING,
    ClaimState.FINISHING,
    ClaimState.STUCK,
    ClaimState.LOST,
)

#: The moves a claim may make (forgetting it is allowed from every state).
LEGAL: dict[ClaimState, frozenset[ClaimState]] = {
    READY: frozenset({RUNNING, FINISHING, LOST}),
    RUNNING: frozenset({FINISHING, LOST}),
    # A stop whose grace ran out takes even a finishing claim (a timed-out handler that
    # ignores its cancellation): its job is released.
    FINISHING: frozenset({STUCK, LOST}),
    STUCK: frozenset({FINISHING, LOST}),
    LOST: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A claim was asked to move where its state machine does not go: a consumer bug."""


@dataclass(slots=True, eq=False)
class ClaimRecord:
    """One held claim: its state, and what the parts of the consumer need to know of it."""

    claim: Claim
    state: ClaimState = READY
    started: float | None = None  # loop time its handler started
    task: asyncio.Task[Any] | None = None  # its handler, once started
    # Called when the claim is lost, to wake whoever awaits its handler.
    wake: Callable[[], None] | None = None
    # While its outcome is retried on errors: the loop time past which it is given up,
    # set by the first error.
    give_up_at: float | None = None


class ClaimTracker:
    """The claims a consumer holds, from claim until forgotten: one :class:`ClaimRecord`
    each, keyed by :data:`Key`."""

    def __init__(self) -> None:
        self._records: dict[Key, ClaimRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ClaimRecord]:
        return iter(list(self._records.values()))

    def get(self, key: Key) -> ClaimRecord | None:
        """The record of ``key``, or None once it is forgotten (or was never held)."""
        return self._records.get(key)

    def claims(self) -> list[Claim]:
        """Every claim held, whatever its state."""
        return [r.claim for r in self._records.values()]

    def hold(self, claim: Claim) -> ClaimRecord:
        """A claim just leased to us: ``READY``."""
        record = self._records[key_of(claim)] = ClaimRecord(claim)
        return record

    def move(self, record: ClaimRecord, to: ClaimState) -> None:
        """Move ``record`` to ``to``; :class:`IllegalTransition` if that is no legal move."""
        if to not in LEGAL[record.state]:
            raise IllegalTransition(
                f"claim {record.claim.job_id}#{record.claim.token}: {record.state.value} -> {to.value}"
            )
        record.state = to

    def start(self, key: Key, at: float, task: asyncio.Task[Any]) -> ClaimRecord:
        """Its handler started at loop time ``at``: ``READY`` -> ``RUNNING``."""
        record = self._records[key]
        self.move(record, RUNNING)
        record.started, record.task = at, task
        return record

    def finish(self, key: Key) -> None:
        """Its outcome is on its way: -> ``FINISHING`` (a lost or forgotten claim stays as
        it is: that outcome will be stale)."""
        record = self._records.get(key)
        if record is not None and record.state in (READY, RUNNING):
            self.move(record, FINISHING)

    def lose(self, key: Key) -> ClaimRecord | None:
        """Its lease is gone: -> ``LOST``; the record, or None if it is not held."""
        record = self._records.get(key)
        if record is not None and record.state is not LOST:
            self.move(record, LOST)
        return record

    def is_lost(self, key: Key) -> bool:
        """True once ``key`` is lost, or no longer held at all."""
        record = self._records.get(key)
        return record is None or record.state is LOST

    def give_up(self, key: Key, now: float, lease_s: float) -> bool:
        """Its outcome met an error at loop time ``now``: ``FINISHING`` -> ``STUCK``, to be
        given up a lease after the first error, however often its lease is renewed
        meanwhile. True once that time has come (and for a claim no longer held: the job
        was handed back)."""
        record = self._records.get(key)
        if record is None:
            return True
        if record.give_up_at is None:
            record.give_up_at = now + lease_s
            if record.state is FINISHING:
                self.move(record, STUCK)
        return now >= record.give_up_at

    def settled(self, key: Key) -> None:
        """Its outcome went through, or was given up: ``STUCK`` -> ``FINISHING``."""
        record = self._records.get(key)
        if record is None:
            return
        record.give_up_at = None
        if record.state is STUCK:
            self.move(record, FINISHING)

    def renewable(self) -> list[ClaimRecord]:
        """The claims whose lease the lease keeper renews: all but those ``FINISHING``."""
        return [r for r in self._records.values() if r.state is not FINISHING]

    def running(self) -> list[ClaimRecord]:
        """The claims whose handler started and has not returned yet."""
        return [r for r in self._records.values() if r.task is not None and not r.task.done()]

    def forget(self, key: Key) -> None:
        """No longer held (finished, handed back or given up), whatever its state."""
        self._records.pop(key, None)


def split_suspects(claims: list[Claim]) -> tuple[list[Claim], list[Claim]]:
    """A claimed batch: the jobs to keep, and the suspects (jobs with stalls) beyond the
    first, to be released at once (which spends no delivery).

    Jobs whose holder died come back together from the reaper, and one lane claim would
    take them together again: a job that kills its worker would then take the same
    innocent neighbours down with it on every delivery, until they too were dead-lettered
    as poison. So a job whose holder died before travels alone: a batch keeps one, and
    while it is held the consumer claims nothing more; it never parks on the wake key
    meanwhile, so the token the releases leave goes to another. A job back after a
    failure or a release is no suspect: its worker lived to report it, so it travels with
    the others.
    """
    kept: list[Claim] = []
    extra: list[Claim] = []
    suspect = False
    for claim in claims:
        if claim.stalls:
            if suspect:
                extra.append(claim)
                continue
            suspect = True
        kept.append(claim)
    return kept, extra
