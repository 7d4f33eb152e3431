"""Cancelling a job: out of wherever it waits or runs, for good (``Jobs.cancel``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import checks
from .scripts import SCRIPTS, Call

if TYPE_CHECKING:
    from .queue import Queue


def cancel_call(q: Queue, job_id: str) -> Call:
    """The ``cancel.lua`` call for ``job_id`` (checked), for a caller that sends its own."""
    checks.name("job_id", job_id)
    s = q.settings
    return (
        SCRIPTS["cancel"],
        q.keys.script_keys("cancel", q.keys.job(job_id)),
        [job_id, s.events_maxlen, s.keep_completed, s.keep_completed_ms],
    )


async def cancel(q: Queue, job_id: str) -> bool:
    """True when ``job_id`` was waiting, scheduled or running and is now ``"cancelled"``
    (counted once, one ``cancelled`` event); False for an unknown, finished, dead or
    already cancelled job. A running job's holder finds its token stale. Cancelled rows
    are retained as completed ones are (``Settings.keep_completed``, ``keep_completed_ms``)."""
    return bool(int(await q.runner.run(*cancel_call(q, job_id))))
