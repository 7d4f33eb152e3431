"""``Outage``: a dependency of the handler down, from the first ``Unavailable`` until it
answers again. A job that keeps raising it while others get through is the trouble: each
hand-back is a strike on its row, and at :data:`HAND_BACKS` it fails instead."""

from __future__ import annotations

import asyncio

# Ten: the few completions still landing as a real outage begins never fail a job that
# only waited, while a job that is the trouble costs each consumer ten short waits.
HAND_BACKS = 10


class HandedBackTooOften(Exception):
    """The handler kept raising ``Unavailable`` while other jobs completed: its job fails."""


class Outage:
    """A dependency's outage, in loop time; ``epoch`` counts the waits, ``resumed`` is set
    while none lasts."""

    def __init__(self) -> None:
        self.why: str | None = None  # None while all is well
        self.since = 0.0
        self.resumed_at = 0.0
        self.epoch = 0
        self.resumed = asyncio.Event()
        self.tripped_by: str | None = None  # the job whose hand-back began the wait

    @property
    def active(self) -> bool:
        return self.why is not None

    def begin(self, started: float, error: BaseException, now: float, job_id: str = "") -> bool:
        """True if a handler that started at ``started`` and raised ``error`` begins a wait
        (none lasts, and news older than the last one changes nothing)."""
        if self.why is not None or started < self.resumed_at:
            return False
        self.why = f"{error}"[:200] or type(error).__name__
        self.tripped_by = job_id or None
        self.since = now
        self.epoch += 1
        self.resumed.clear()
        return True

    def answered_by(self, started: float) -> bool:
        return self.why is not None and started >= self.since

    def end(self, now: float) -> float:
        """The wait ends; how long it lasted (s)."""
        lasted = now - self.since
        self.why = None
        self.tripped_by = None
        self.resumed_at = now
        self.resumed.set()
        return lasted
