"""The consumer's waits. Each watches an event as well as its own cancellation: a cancel
landing inside the client library mid-command can be swallowed there."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from .trouble import Trouble


async def until(aw: Awaitable[Any], *events: asyncio.Event) -> bool:
    """Await ``aw`` unless one of ``events`` is set first (``aw`` is then cancelled); True
    when ``aw`` finished, its error raised."""
    task = asyncio.ensure_future(aw)
    stops = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait({task, *stops}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for stop in stops:
            stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # surface errors (TRANSIENT ones are handled by the caller)
    return True


async def wait_any(timeout: float, *events: asyncio.Event) -> float:
    """Wait for one of ``events`` or ``timeout`` s; returns the time waited."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return loop.time() - t0


async def pause(seconds: float, closing: asyncio.Event) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(closing.wait(), max(0.0, seconds))


async def every(
    interval_ms: int, fn: Callable[[], Awaitable[None]], closing: asyncio.Event, where: str
) -> None:
    """Call ``fn`` every ``interval_ms`` until ``closing``; its errors never end the loop."""
    loop = asyncio.get_running_loop()
    trouble = Trouble(where)
    while not closing.is_set():
        started = loop.time()
        try:
            await fn()
            trouble.ok()
        except Exception as e:  # noqa: BLE001 - any error: the loop must go on
            trouble.note(e)
        # Start to start and never late: the re-claim bound and the beats' margin inside
        # the lapse are built on it; the jitter only makes it earlier.
        await pause(
            interval_ms / 1000 * random.uniform(0.8, 1.0) - (loop.time() - started), closing
        )
