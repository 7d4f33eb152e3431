"""A request's body, read whole at the door before it counts against anything."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message, Receive, Scope

from web.errors import MAX_BODY_BYTES

# How long a request's body may take to arrive before it is 408 request_timeout: the
# contract's 16 KiB take a fraction of this on the slowest honest link, and until it is
# here the request holds nothing at the door.
BODY_TIMEOUT_S = 2.0


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyDeadlines:
    """Cancels the requests still reading their body ``seconds`` after they began, on one
    timer that ticks every ``tick`` seconds while any is reading: a request pays a dict
    entry, where an ``asyncio.timeout`` of its own cost as much as the rest of the door.
    A body is late between ``seconds`` and ``seconds + tick``."""

    _LATE = -1.0  # a reader the timer cancelled

    def __init__(self, seconds: float, tick: float = 0.25) -> None:
        self.seconds = seconds
        self.tick = tick
        self._due: dict[asyncio.Task[Any], float] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def read(self, receive: Receive) -> list[Message] | None:
        """:func:`_arrived` within the deadline; :class:`TimeoutError` past it."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._due[task] = loop.time() + self.seconds
        if self._timer is None:
            self._timer = loop.call_later(self.tick, self._sweep, loop)
        try:
            return await _arrived(receive)
        except asyncio.CancelledError:
            if self._due.get(task) != self._LATE:
                raise
            task.uncancel()
            raise TimeoutError from None
        finally:
            del self._due[task]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for task, due in self._due.items():
            if 0 <= due <= now:
                self._due[task] = self._LATE
                task.cancel()
        if self._due:
            self._timer = loop.call_later(self.tick, self._sweep, loop)


async def _arrived(receive: Receive) -> list[Message] | None:
    """The request's body messages, read until the body is whole or past
    ``MAX_BODY_BYTES`` (the app then refuses it 413 in the contract's order); None if the
    client left first."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        messages.append(message)
        size += len(message.get("body", b""))
        if not message.get("more_body", False) or size > MAX_BODY_BYTES:
            return messages


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that hands out ``messages`` first (the body the door read)."""
    pending = list(reversed(messages))

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
