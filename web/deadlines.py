"""Deadlines for many short tasks on one timer.

``asyncio.timeout`` schedules a timer per use and cancels it on the way out; at a thousand
requests a second that is a heap push and a cancelled handle left in the loop's heap per
request, about as much as the rest of the edge. A :class:`Deadlines` keeps the tasks inside
it in a dict and checks them on one timer that ticks only while any is inside: a task pays
a dict entry, and a deadline is met within one tick (it is a bound on a hung backend, not a
schedule).

    deadlines = Deadlines(5.0)
    async with deadlines.within():     # TimeoutError once 5 s (+ up to a tick) have passed
        await work()
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

__all__ = ["Deadlines"]


class _Within:
    __slots__ = ("_cancelling", "_deadlines", "_task", "late")

    def __init__(self, deadlines: Deadlines) -> None:
        self._deadlines = deadlines
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self.late = False

    async def __aenter__(self) -> Self:
        task = asyncio.current_task()
        assert task is not None, "Deadlines.within() is for tasks"
        self._task = task
        self._cancelling = task.cancelling()
        self._deadlines._enter(self, task)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._deadlines._leave(self)
        if self.late and kind is not None and issubclass(kind, asyncio.CancelledError):
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling:  # ours, not a caller's as well
                raise TimeoutError from exc


class Deadlines:
    """``within()``: a context in which the current task is cancelled ``seconds`` after it
    entered (surfacing as :class:`TimeoutError`), checked every ``tick`` seconds."""

    def __init__(self, seconds: float, tick: float = 0.25) -> None:
        if seconds <= 0 or tick <= 0:
            raise ValueError("seconds and tick must be > 0")
        self.seconds = seconds
        self.tick = tick
        self._due: dict[_Within, tuple[asyncio.Task[object], float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._due)

    def within(self) -> _Within:
        return _Within(self)

    def _enter(self, entry: _Within, task: asyncio.Task[object]) -> None:
        loop = asyncio.get_running_loop()
        self._due[entry] = (task, loop.time() + self.seconds)
        # A timer of a loop that is gone (a process runs loops one after another) ticks no
        # more: the running loop gets one of its own.
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_later(self.tick, self._sweep, loop)

    def _leave(self, entry: _Within) -> None:
        self._due.pop(entry, None)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return  # superseded by the running loop's timer
        self._timer = None
        now = loop.time()
        late = [entry for entry, (_, due) in self._due.items() if due <= now]
        for entry in late:
            task, _ = self._due.pop(entry)
            entry.late = True
            task.cancel()
        if self._due:
            self._timer = loop.call_later(self.tick, self._sweep, loop)
