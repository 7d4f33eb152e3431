"""The worker registry, read: which workers consume a queue, and what each says of itself.

Every :class:`~echomq.Consumer` heartbeats into its queue's registry (``lua/heartbeat.lua``):

* the sorted set ``emq:{q}:workers`` maps each registered worker to its heartbeat deadline
  (server ms); the reaper removes a worker whose deadline passed (and reclaims its jobs), a
  clean stop removes its own;
* the hash ``emq:{q}:worker:<id>`` holds the worker's self-description as of its last beat:
  ``pid``, ``host``, ``state`` (``idle``, ``busy``, ``waiting`` for a dependency, or what
  the consumer's ``meta`` callable put there), ``jobs`` it holds, ``jobs_done``, the
  server time of the ``beat`` and its ``lapse_ms``, plus any other ``meta`` field. It outlives
  the last beat (an hour by default), marked ``lapsed`` (server ms) by the reaper or
  ``stopped`` by a clean stop, so a worker that went away can still be described.

:func:`workers` lists the registered workers; :func:`worker` describes one, registered or
not. Both read only (no script, nothing written) and take a :class:`~echomq.Queue` or a
:class:`~echomq.Partitioned` (whose consumers register one id on every partition).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import checks
from .codec import text
from .partitions import Partitioned, beat_of
from .queue import Queue


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One worker as the registry knows it.

    ``alive`` is True while the worker is registered (its heartbeat deadline has not been
    found lapsed by the reaper, and it has not stopped); ``deadline_ms`` is that deadline
    on the server clock, None once it left. Every other field comes from its
    self-description, None (or empty) where the row lacks it; ``meta`` holds the whole row as
    stored, the fields named here included.
    """

    worker_id: str
    alive: bool
    deadline_ms: int | None
    state: str | None
    pid: int | None
    host: str | None
    jobs: tuple[str, ...]
    jobs_done: int
    beat_ms: int | None
    lapse_ms: int | None
    lapsed_ms: int | None
    stopped_ms: int | None
    waiting_for: str | None
    meta: Mapping[str, str]

    @classmethod
    def from_row(
        cls, worker_id: str, deadline_ms: int | None, raw: Mapping[Any, Any]
    ) -> WorkerRecord:
        """A record from the worker's hash (bytes or str fields) and its registry score."""
        row = {text(k): text(v) for k, v in raw.items()}
        jobs = row.get("jobs", "")
        return cls(
            worker_id=worker_id,
            alive=deadline_ms is not None,
            deadline_ms=deadline_ms,
            state=row.get("state") or None,
            pid=_integer(row.get("pid")),
            host=row.get("host") or None,
            jobs=tuple(j for j in jobs.split(",") if j),
            jobs_done=_integer(row.get("jobs_done")) or 0,
            beat_ms=_integer(row.get("beat")),
            lapse_ms=_integer(row.get("lapse_ms")),
            lapsed_ms=_integer(row.get("lapsed")),
            stopped_ms=_integer(row.get("stopped")),
            waiting_for=row.get("waiting_for") or None,
            meta=row,  # a dict, not a read-only proxy: dataclasses.asdict copies it
        )


def _integer(raw: str | None) -> int | None:
    # A field another program wrote by hand may not be a number: unknown, not an error.
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


async def workers(queue: Queue | Partitioned) -> list[WorkerRecord]:
    """The registered workers, in heartbeat-deadline order, each with its self-description.
    On a :class:`~echomq.Partitioned` queue each worker once, as its latest beat has it."""
    if isinstance(queue, Partitioned):
        return [
            WorkerRecord.from_row(w.worker_id, w.deadline_ms, w.meta) for w in await queue.workers()
        ]
    _check(queue)
    keys = queue.keys
    rows = await queue.conn.zrange(keys.workers, 0, -1, withscores=True)
    ids = [text(wid) for wid, _ in rows]
    pipe = queue.conn.pipeline(transaction=False)
    for wid in ids:
        pipe.hgetall(keys.worker(wid))
    metas = await pipe.execute() if ids else []
    return [
        WorkerRecord.from_row(wid, int(score), meta)
        for wid, (_, score), meta in zip(ids, rows, metas, strict=True)
    ]


async def worker(queue: Queue | Partitioned, worker_id: str) -> WorkerRecord | None:
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
        return WorkerRecord.from_row(worker_id, live.deadline_ms, described.meta)
    _check(queue)
    pipe = queue.conn.pipeline(transaction=False)
    pipe.zscore(queue.keys.workers, worker_id)
    pipe.hgetall(queue.keys.worker(worker_id))
    score, meta = await pipe.execute()
    if score is None and not meta:
        return None
    return WorkerRecord.from_row(worker_id, None if score is None else int(score), meta)


def _check(queue: object) -> None:
    if not isinstance(queue, Queue):
        raise TypeError(f"queue must be an echomq.Queue or Partitioned, got {type(queue).__name__}")
