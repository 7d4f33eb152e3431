"""Dead jobs on the durable floor, where operators retry or discard them.

A row is *open* while the job is dead and nobody has acted on it; retrying stamps
``retried_at_ms``, discarding sets ``discarded``. Both are kept as history rather than
deleted, and a job that dies again after a retry reopens its row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store._sql import first_row, upsert_insert
from codemojex.store.models import DeadJobRow
from codemojex.store.records import DeadJob

__all__ = [
    "Death",
    "delete_dead",
    "get_dead",
    "list_dead",
    "mark_dead_retried",
    "upsert_dead",
    "upsert_dead_many",
]

_OPEN = (DeadJobRow.retried_at_ms.is_(None), DeadJobRow.discarded.is_(False))
_ROWS_PER_STATEMENT = 500


@dataclass(frozen=True)
class Death:
    """One death of a job, as a sweep of the dead set reports it."""

    job_id: str
    queue: str
    lane: str | None
    payload: str | Mapping[str, Any]
    error: str | None
    reason: str | None
    attempts: int
    died_at_ms: int


async def upsert_dead(
    engine: AsyncEngine,
    *,
    job_id: str,
    queue: str,
    lane: str | None,
    payload: str | Mapping[str, Any],
    error: str | None,
    reason: str | None,
    attempts: int,
    died_at_ms: int,
) -> bool:
    """Record that ``job_id`` died. True iff this recorded a new death.

    Idempotent per death: the same death reported twice (an event handled twice, say
    after an operator already retried the job) changes nothing. A later death of the same
    job — after a retry — has a higher ``attempts`` (EchoMQ's attempts never decrease and
    every death follows a delivery), so it replaces the row and reopens it.
    """
    death = Death(job_id, queue, lane, payload, error, reason, attempts, died_at_ms)
    return await upsert_dead_many(engine, [death]) == 1


async def upsert_dead_many(engine: AsyncEngine, deaths: Sequence[Death]) -> int:
    """Record many deaths in one transaction, each as ``upsert_dead`` would; returns how
    many were new. One commit for a sweep's page, not one per death: on SQLite a commit is
    the cost (test_durable_floor.py's 1,205 deaths: 28.3 s a commit each, 7.8 s a page)."""
    latest: dict[str, Death] = {}
    for d in deaths:  # one row per job: PostgreSQL refuses to update a row twice in a statement
        if d.job_id not in latest or d.attempts > latest[d.job_id].attempts:
            latest[d.job_id] = d
    if not latest:
        return 0
    rows = [
        {
            "job_id": d.job_id,
            "queue": d.queue,
            "lane": d.lane,
            "payload": d.payload
            if isinstance(d.payload, str)
            else json.dumps(d.payload, ensure_ascii=False),
            "error": d.error,
            "reason": d.reason,
            "attempts": d.attempts,
            "died_at_ms": d.died_at_ms,
            "retried_at_ms": None,
            "discarded": False,
        }
        for d in latest.values()
    ]
    new = 0
    async with engine.begin() as conn:
        # 10 parameters a row: 500 rows stay under SQLite's 32,766 (and PostgreSQL's 65,535).
        for first in range(0, len(rows), _ROWS_PER_STATEMENT):
            stmt = upsert_insert(conn, DeadJobRow).values(rows[first : first + _ROWS_PER_STATEMENT])
            stmt = stmt.on_conflict_do_update(
                index_elements=["job_id"],
                set_={k: stmt.excluded[k] for k in rows[0] if k != "job_id"},
                where=stmt.excluded.attempts > DeadJobRow.attempts,
            ).returning(DeadJobRow.job_id)
            new += len((await conn.execute(stmt)).all())
    return new


async def list_dead(
    engine: AsyncEngine, limit: int = 100, *, include_handled: bool = False
) -> list[DeadJob]:
    """Dead jobs, newest death first; only open ones unless ``include_handled``."""
    stmt = select(DeadJobRow).order_by(DeadJobRow.died_at_ms.desc(), DeadJobRow.job_id.desc())
    if not include_handled:
        stmt = stmt.where(*_OPEN)
    async with engine.connect() as conn:
        return [_dead(row) for row in await conn.execute(stmt.limit(limit))]


async def get_dead(engine: AsyncEngine, job_id: str) -> DeadJob | None:
    """The row for ``job_id`` in any state (check ``retried_at_ms`` / ``discarded``)."""
    row = await first_row(engine, select(DeadJobRow).where(DeadJobRow.job_id == job_id))
    return _dead(row) if row is not None else None


async def mark_dead_retried(engine: AsyncEngine, job_id: str, now_ms: int) -> bool:
    """Stamp an open dead job as retried. False if unknown, already retried or discarded."""
    return await _close(engine, job_id, retried_at_ms=now_ms)


async def delete_dead(engine: AsyncEngine, job_id: str) -> bool:
    """Discard an open dead job (kept as history). False if unknown or not open."""
    return await _close(engine, job_id, discarded=True)


async def _close(engine: AsyncEngine, job_id: str, **values: Any) -> bool:
    async with engine.begin() as conn:
        result = await conn.execute(
            update(DeadJobRow)
            .where(DeadJobRow.job_id == job_id, *_OPEN)
            .values(**values)
            .returning(DeadJobRow.job_id)
        )
        return result.first() is not None


def _dead(row: Any) -> DeadJob:
    return DeadJob(
        job_id=row.job_id,
        queue=row.queue,
        lane=row.lane,
        payload=row.payload,
        error=row.error,
        reason=row.reason,
        attempts=row.attempts,
        died_at_ms=row.died_at_ms,
        retried_at_ms=row.retried_at_ms,
        discarded=bool(row.discarded),
    )
