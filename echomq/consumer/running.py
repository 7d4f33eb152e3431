"""Awaiting one handler: until it ends, its lease is lost or it runs past ``timeout_ms``.

This is the hot path of every job, so it waits on one future woken by whichever comes
first: the handler's end (a done callback), its lease lost (the claim's ``wake``) or its
deadline (a timer). A task waiting on an Event plus ``asyncio.wait`` cost about three
more loop callbacks and a task per job.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from .claims import LOST, ClaimRecord

log = logging.getLogger("echomq.consumer")

Verdict = Literal["done", "timed out", "abandoned"]

# How long a cancelled handler (timed out, or its lease lost) may take to unwind before
# its slot gives up on it: a handler that swallows cancellation must not hold a slot, or
# its job, forever.
UNWIND_S = 1.0


async def await_handler(
    record: ClaimRecord, task: asyncio.Task[Any], timeout_ms: int | None
) -> Verdict:
    """Wait for ``record``'s handler ``task``: ``"done"`` when it ended (its result or
    error is the task's), ``"timed out"`` when it ran past ``timeout_ms`` (it is
    cancelled), ``"abandoned"`` when its lease was lost and it did not unwind within a
    second of the cancel. A cancelled handler that does not unwind is left behind: it
    holds neither its job nor its slot."""
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
        # Cancelled by the lease keeper (or a stop past its grace).
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
