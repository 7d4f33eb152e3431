"""Awaiting one handler: until it ends, its lease is lost or it runs past ``timeout_ms``.
Every job's hot path: one future, woken by a done callback, the claim's ``wake`` or a
timer (an Event and ``asyncio.wait`` cost a task and three callbacks more per job)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from .claims import LOST, ClaimRecord

log = logging.getLogger("echomq.consumer")

Verdict = Literal["done", "timed out", "abandoned"]

# A handler that swallows its cancellation must not hold a slot, or its job, forever.
UNWIND_S = 1.0


async def await_handler(
    record: ClaimRecord, task: asyncio.Task[Any], timeout_ms: int | None
) -> Verdict:
    """``"done"`` (the outcome is the task's), ``"timed out"`` (cancelled), or
    ``"abandoned"`` (its lease lost, it did not unwind within ``UNWIND_S``)."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    task.add_done_callback(wake)
    record.wake = wake
    timer = None
    if timeout_ms is not None:
        timer = loop.call_later(timeout_ms / 1000, wake)
    if record.state is LOST:
        wake()  # lost before this wait began
    try:
        await woken
    except asyncio.CancelledError:
        task.cancel()  # the slot itself is being stopped: its handler with it
        raise
    finally:
        task.remove_done_callback(wake)
        if timer is not None:
            timer.cancel()
        record.wake = None
    if task.done():
        return "done"
    job_id = record.claim.job_id
    if record.state is LOST:
        await asyncio.wait({task}, timeout=UNWIND_S)
        if task.done():
            return "done"
        log.error("job %s: its handler ignores cancellation; left behind", job_id)
        return "abandoned"
    task.cancel()  # past timeout_ms
    await asyncio.wait({task}, timeout=UNWIND_S)
    if not task.done():
        log.error(
            "job %s: its handler ran past timeout_ms and ignores cancellation; the job"
            " is failed and the handler left behind",
            job_id,
        )
    return "timed out"
