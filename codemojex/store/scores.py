"""Scored guesses: the idempotent write at the heart of exactly-once scoring.

EchoMQ delivers a guess at least once: a worker killed after its SQL commit but before
completing the job leaves the job to be scored again, and a zombie may race its
successor. What makes the effect exactly-once is this module: the score row is keyed on
the JOB id, and the standings move only in the transaction that inserted that row.

Standings are maxima, not sums of events: a player's round points are the best
``(points, earliest seq)`` over their scored guesses, and their totals are recomputed from
their round points. So the result depends only on *which* guesses were scored, never on
the order in which they were scored, retried or raced.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from codemojex.store._sql import dump_list, load_list, upsert_insert
from codemojex.store.models import RoundPointsRow, ScoreRow, TotalRow
from codemojex.store.records import ScoreRecord

__all__ = ["record_score", "score_by_job", "scores_for"]


async def record_score(engine: AsyncEngine, score: ScoreRecord) -> bool:
    """Write ``score`` and move the standings, once per JOB id. True iff this call wrote it.

    One transaction: insert the score row (``ON CONFLICT (job_id) DO NOTHING``); only if
    that inserted a row, raise the player's round points and recompute their totals. A
    second call for the same job — a retry, a zombie, a concurrent duplicate — inserts
    nothing and changes nothing (PostgreSQL makes a concurrent duplicate wait for the
    first transaction, then see the conflict; SQLite serialises writers).
    """
    async with engine.begin() as conn:
        inserted = await conn.execute(
            upsert_insert(conn, ScoreRow)
            .values(_score_values(score))
            .on_conflict_do_nothing(index_elements=["job_id"])
            .returning(ScoreRow.job_id)
        )
        if inserted.first() is None:
            return False
        await _lock_totals(conn, score.player_id, score.accepted_at_ms)
        await _raise_round_points(conn, score)
        await _refresh_totals(conn, score.player_id)
    return True


async def _lock_totals(conn: AsyncConnection, player_id: str, now_ms: int) -> None:
    """Create the player's totals row if absent and lock it until commit.

    Serialises all standings updates of one player: without it, two PostgreSQL
    transactions scoring the player's guesses in *different* rounds would each recompute
    the totals without seeing the other's round (read committed) and one update would be
    lost. SQLite ignores FOR UPDATE; its single writer already serialises.
    """
    await conn.execute(
        upsert_insert(conn, TotalRow)
        .values(player_id=player_id, points=0, solved_rounds=0, reached_at_ms=now_ms)
        .on_conflict_do_nothing(index_elements=["player_id"])
    )
    await conn.execute(
        select(TotalRow.player_id).where(TotalRow.player_id == player_id).with_for_update()
    )


async def _raise_round_points(conn: AsyncConnection, score: ScoreRecord) -> None:
    """Make ``score`` the player's best guess of the round if it beats the current best.

    Best = most points, then lowest seq, then lowest JOB id: a total order, so the best
    of a set of guesses is the same whatever order they arrive in.
    """
    rp = RoundPointsRow
    where = and_(rp.player_id == score.player_id, rp.round_id == score.round_id)
    current = (
        await conn.execute(select(rp.points, rp.best_seq, rp.best_job_id).where(where))
    ).first()
    values = {
        "points": score.points,
        "best_seq": score.seq,
        "best_job_id": score.job_id,
        "reached_at_ms": score.accepted_at_ms,
    }
    if current is None:
        await conn.execute(
            insert(rp).values(player_id=score.player_id, round_id=score.round_id, **values)
        )
    elif (-score.points, score.seq, score.job_id) < (
        -current.points,
        current.best_seq,
        current.best_job_id,
    ):
        await conn.execute(update(rp).where(where).values(**values))


async def _refresh_totals(conn: AsyncConnection, player_id: str) -> None:
    """Recompute the player's totals from their round points (order-independent).

    ``reached_at`` is when the player reached their total: the latest ``reached_at`` of a
    round that paid; a player with no points yet ranks by their first scored guess.
    """
    rp = RoundPointsRow
    paid = rp.points > 0
    agg = (
        await conn.execute(
            select(
                func.coalesce(func.sum(rp.points), 0),
                func.coalesce(func.sum(case((paid, 1), else_=0)), 0),
                func.max(case((paid, rp.reached_at_ms), else_=None)),
                func.min(rp.reached_at_ms),
            ).where(rp.player_id == player_id)
        )
    ).one()
    points, solved_rounds, last_paid_ms, first_ms = agg
    await conn.execute(
        update(TotalRow)
        .where(TotalRow.player_id == player_id)
        .values(
            points=int(points),
            solved_rounds=int(solved_rounds),
            reached_at_ms=int(last_paid_ms if last_paid_ms is not None else first_ms),
        )
    )


async def score_by_job(engine: AsyncEngine, job_id: str) -> ScoreRecord | None:
    """The score written for ``job_id``, if it has been scored."""
    async with engine.connect() as conn:
        row = (await conn.execute(select(ScoreRow).where(ScoreRow.job_id == job_id))).first()
    return _score(row) if row is not None else None


async def scores_for(
    engine: AsyncEngine, player_id: str, round_id: str | None = None
) -> list[ScoreRecord]:
    """A player's scored guesses, in one round (by seq) or in all (by acceptance)."""
    stmt = select(ScoreRow).where(ScoreRow.player_id == player_id)
    if round_id is not None:
        stmt = stmt.where(ScoreRow.round_id == round_id).order_by(ScoreRow.seq, ScoreRow.job_id)
    else:
        stmt = stmt.order_by(ScoreRow.accepted_at_ms, ScoreRow.job_id)
    async with engine.connect() as conn:
        return [_score(row) for row in await conn.execute(stmt)]


def _score_values(score: ScoreRecord) -> dict[str, Any]:
    return {
        "job_id": score.job_id,
        "round_id": score.round_id,
        "player_id": score.player_id,
        "seq": score.seq,
        "guess": dump_list(score.guess),
        "exact": score.exact,
        "near": score.near,
        "solved": score.solved,
        "points": score.points,
        "accepted_at_ms": score.accepted_at_ms,
        "scored_at_ms": score.scored_at_ms,
        "attempts": score.attempts,
        "worker_id": score.worker_id,
    }


def _score(row: Any) -> ScoreRecord:
    return ScoreRecord(
        job_id=row.job_id,
        round_id=row.round_id,
        player_id=row.player_id,
        seq=row.seq,
        guess=load_list(row.guess),
        exact=row.exact,
        near=row.near,
        solved=bool(row.solved),
        points=row.points,
        accepted_at_ms=row.accepted_at_ms,
        scored_at_ms=row.scored_at_ms,
        attempts=row.attempts,
        worker_id=row.worker_id,
    )
