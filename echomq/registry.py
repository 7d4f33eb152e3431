"""The worker registry, read: which workers consume a queue (each :class:`~echomq.Consumer`
heartbeats into it), and what each says of itself."""

from __future__ import annotations

import asyncio

from . import checks
from .partitions import Partitioned, beat_of
from .queue import Queue
from .types import WorkerInfo


async def workers(queue: Queue | Partitioned) -> list[WorkerInfo]:
    """The registered workers, in heartbeat-deadline order, each with its self-description.
    On a :class:`~echomq.Partitioned` queue each worker once, as its latest beat has it."""
    if not isinstance(queue, Partitioned):
        _check(queue)
    return await queue.workers()


async def worker(queue: Queue | Partitioned, worker_id: str) -> WorkerInfo | None:
    """``worker_id`` as the registry knows it: registered (``alive``), or gone but still
    described (lapsed or stopped within its row's lifetime, ``alive`` False), or None when
    neither is left. On a :class:`~echomq.Partitioned` queue: alive if registered on any
    partition, described by the row of its latest beat."""
    checks.name("worker_id", worker_id)
    if isinstance(queue, Partitioned):
        each = await asyncio.gather(*(worker(q, worker_id) for q in queue.partitions))
        found = [w for w in each if w is not None]
        if not found:
            return None
        live = next((w for w in found if w.alive), None)
        described = max(found, key=lambda w: beat_of(w.meta))
        if live is None or live is described:
            return described
        return WorkerInfo.from_row(worker_id, live.deadline_ms, described.meta)
    _check(queue)
    pipe = queue.conn.pipeline(transaction=False)
    pipe.zscore(queue.keys.workers, worker_id)
    pipe.hgetall(queue.keys.worker(worker_id))
    score, meta = await pipe.execute()
    if score is None and not meta:
        return None
    return WorkerInfo.from_row(worker_id, None if score is None else int(score), meta)


def _check(queue: object) -> None:
    if not isinstance(queue, Queue):
        raise TypeError(f"queue must be an echomq.Queue or Partitioned, got {type(queue).__name__}")
