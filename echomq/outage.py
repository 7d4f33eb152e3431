"""``Outage``: a dependency of the handler down, from the first ``Unavailable`` until it
answers again.

While it lasts the consumer claims nothing but its probe: a handler that raises
:class:`~echomq.Unavailable` hands its job back (no delivery spent), and news older than
the wait (a handler that started before the last wait ended) changes nothing.
"""

from __future__ import annotations

import asyncio


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

    @property
    def active(self) -> bool:
        """True while the wait lasts."""
        return self.why is not None

    def begin(self, started: float, error: BaseException, now: float) -> bool:
        """A handler that started at ``started`` raised ``error``: True if that begins a
        wait (none lasts, and the handler started after the last one ended)."""
        if self.why is not None or started < self.resumed_at:
            return False
        self.why = f"{error}"[:200] or type(error).__name__
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
        self.resumed_at = now
        self.resumed.set()
        return lasted
