"""``Outage``: a dependency of the handler down, from the first ``Unavailable`` until it
answers again.

While it lasts the consumer claims nothing but its probe: a handler that raises
:class:`~echomq.Unavailable` hands its job back (no delivery spent), and news older than
the wait (a handler that started before the last wait ended) changes nothing.

One job that keeps raising ``Unavailable`` while others get through is not an outage: each
such hand-back is a strike on its row (lua/release.lua), and at :data:`HAND_BACKS` strikes
the job is failed instead (:class:`HandedBackTooOften`). The job that began a wait is never
its probe while another job can be.
"""

from __future__ import annotations

import asyncio

# Strikes a job may take before it is failed instead of handed back: hand-backs for
# `Unavailable` with a completion of any job since its last one. Ten, so that the few
# completions still landing as a real outage begins (one per worker that hands the job on)
# never fail a job that only waited, while a job that is itself the trouble costs each
# consumer ten short waits, then fails at once at each later delivery.
HAND_BACKS = 10


class HandedBackTooOften(Exception):
    """The handler kept raising ``Unavailable`` while other jobs completed: the job, not
    its dependency, is the trouble. Its job is failed (a delivery spent, backoff, dead when
    out of deliveries)."""


class Outage:
    """The state of a dependency's outage, in loop time. ``epoch`` counts the waits, so
    that whoever waits on one can tell a new one began; ``resumed`` is set while none
    lasts."""

    def __init__(self) -> None:
        self.why: str | None = None  # None while all is well
        self.since = 0.0  # when the wait began
        self.resumed_at = 0.0  # when the last wait ended
        self.epoch = 0
        self.resumed = asyncio.Event()
        self.tripped_by: str | None = None  # the job whose hand-back began the wait

    @property
    def active(self) -> bool:
        """True while the wait lasts."""
        return self.why is not None

    def begin(self, started: float, error: BaseException, now: float, job_id: str = "") -> bool:
        """A handler of ``job_id`` that started at ``started`` raised ``error``: True if
        that begins a wait (none lasts, and the handler started after the last one ended)."""
        if self.why is not None or started < self.resumed_at:
            return False
        self.why = f"{error}"[:200] or type(error).__name__
        self.tripped_by = job_id or None
        self.since = now
        self.epoch += 1
        self.resumed.clear()
        return True

    def answered_by(self, started: float) -> bool:
        """True if a handler that started at ``started`` and got past its dependency ends
        the wait (it started within it)."""
        return self.why is not None and started >= self.since

    def end(self, now: float) -> float:
        """The dependency answers again: the wait ends; returns how long it lasted (s)."""
        lasted = now - self.since
        self.why = None
        self.tripped_by = None
        self.resumed_at = now
        self.resumed.set()
        return lasted
