"""``ClaimTracker``: what a consumer holds, one record and one state per claim (the
states and their moves: ``docs/api/consumer.md``).

Keyed by ``(job_id, attempts, lease id)``, not by job id: after a lost lease the same job
can come back here under a new token while the old attempt unwinds, and after data loss
under the same ``attempts`` with another lease id.
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
    return (job_id, int(token), lease_of(token))


def key_of(claim: Claim) -> Key:
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
    # A stop whose grace ran out takes even a finishing claim: its job is released.
    FINISHING: frozenset({STUCK, LOST}),
    STUCK: frozenset({FINISHING, LOST}),
    LOST: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A claim was asked to move where its state machine does not go: a consumer bug."""


@dataclass(slots=True, eq=False)
class ClaimRecord:
    """One held claim and its state."""

    claim: Claim
    state: ClaimState = READY
    started: float | None = None  # loop time its handler started
    task: asyncio.Task[Any] | None = None  # its handler, once started
    wake: Callable[[], None] | None = None  # wakes whoever awaits its handler, once lost
    give_up_at: float | None = None  # loop time its erring outcome is given up


class ClaimTracker:
    """The claims a consumer holds, from claim until forgotten."""

    def __init__(self) -> None:
        self._records: dict[Key, ClaimRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[ClaimRecord]:
        return iter(list(self._records.values()))

    def get(self, key: Key) -> ClaimRecord | None:
        return self._records.get(key)

    def claims(self) -> list[Claim]:
        return [r.claim for r in self._records.values()]

    def hold(self, claim: Claim) -> ClaimRecord:
        record = self._records[key_of(claim)] = ClaimRecord(claim)
        return record

    def move(self, record: ClaimRecord, to: ClaimState) -> None:
        if to not in LEGAL[record.state]:
            raise IllegalTransition(
                f"claim {record.claim.job_id}#{record.claim.token}: {record.state.value} -> {to.value}"
            )
        record.state = to

    def start(self, key: Key, at: float, task: asyncio.Task[Any]) -> ClaimRecord:
        record = self._records[key]
        self.move(record, RUNNING)
        record.started, record.task = at, task
        return record

    def finish(self, key: Key) -> None:
        """Its outcome is on its way (a lost claim stays lost: that outcome is stale)."""
        record = self._records.get(key)
        if record is not None and record.state in (READY, RUNNING):
            self.move(record, FINISHING)

    def lose(self, key: Key) -> ClaimRecord | None:
        record = self._records.get(key)
        if record is not None and record.state is not LOST:
            self.move(record, LOST)
        return record

    def is_lost(self, key: Key) -> bool:
        record = self._records.get(key)
        return record is None or record.state is LOST

    def give_up(self, key: Key, now: float, lease_s: float) -> bool:
        """Its outcome met an error: True once a lease has passed since the first one,
        however often the lease was renewed meanwhile (or the claim is no longer held)."""
        record = self._records.get(key)
        if record is None:
            return True
        if record.give_up_at is None:
            record.give_up_at = now + lease_s
            if record.state is FINISHING:
                self.move(record, STUCK)
        return now >= record.give_up_at

    def settled(self, key: Key) -> None:
        record = self._records.get(key)
        if record is None:
            return
        record.give_up_at = None
        if record.state is STUCK:
            self.move(record, FINISHING)

    def renewable(self) -> list[ClaimRecord]:
        """All but the ``FINISHING``: an extend racing an outcome would be refused."""
        return [r for r in self._records.values() if r.state is not FINISHING]

    def running(self) -> list[ClaimRecord]:
        return [r for r in self._records.values() if r.task is not None and not r.task.done()]

    def forget(self, key: Key) -> None:
        self._records.pop(key, None)


def split_suspects(claims: list[Claim]) -> tuple[list[Claim], list[Claim]]:
    """A claimed batch: the jobs to keep, and the suspects (jobs with stalls) beyond the
    first, to release at once. Suspects come back together from the reaper: one that
    kills its worker would take the same neighbours down on every delivery, so each
    travels alone."""
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
