"""Waiting for a job's end (``Jobs.result``) and a handler's progress (``Claim.progress``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import checks
from .codec import dumps
from .events import FINAL
from .scripts import SCRIPTS
from .types import FINISHED, JobInfo, lease_of

if TYPE_CHECKING:
    from .queue import Queue

# A progress value is stored on the row and copied into the stream: small, as a header is.
MAX_PROGRESS_BYTES = 65_536
# One blocking read waits at most this long, under any sane socket timeout of the client.
READ_SLICE_MS = 5_000


def encode_progress(value: Any) -> bytes:
    """``value`` as stored; ``TypeError`` if JSON cannot carry it, ``ValueError`` past
    ``MAX_PROGRESS_BYTES``."""
    encoded = dumps(value)
    if len(encoded) > MAX_PROGRESS_BYTES:
        raise ValueError(f"progress is {len(encoded)} bytes, at most {MAX_PROGRESS_BYTES}")
    return encoded


async def progress(q: Queue, job_id: str, token: int, value: Any) -> bool:
    """Record ``value`` as the running job's progress: True, or False when ``token`` no
    longer holds the job (nothing changed)."""
    checks.name("job_id", job_id)
    attempts = checks.token(token)
    encoded = encode_progress(value)
    reply = await q.runner.run(
        SCRIPTS["progress"],
        q.keys.script_keys("progress", q.keys.job(job_id)),
        [job_id, attempts, lease_of(token), encoded, q.settings.events_maxlen],
    )
    return bool(int(reply))


async def result(q: Queue, job_id: str, timeout_ms: int) -> JobInfo | None:
    """The job once it is completed, dead or cancelled, or None after ``timeout_ms``.

    The stream's position is taken before the row is read, so an end between the two is
    still read from the stream; then it blocks on the events stream (XREAD), never
    polling the row. A job unknown, or whose row was trimmed, waits out the timeout.
    Each blocking read holds one of the queue client's connections for up to
    ``READ_SLICE_MS``: a client with a socket timeout must allow that long."""
    checks.name("job_id", job_id)
    checks.integer("timeout_ms", timeout_ms, at_least=0)
    deadline = time.monotonic() + timeout_ms / 1000
    after = await q.events.last_id()
    info = await q.jobs.get(job_id)
    if info is not None and info.state in FINISHED:
        return info
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            return None
        events = await q.events.read(after, block_ms=min(left_ms, READ_SLICE_MS))
        if events:
            after = events[-1].event_id
        if any(e.job_id == job_id and e.type in FINAL for e in events):
            return await q.jobs.get(job_id)
