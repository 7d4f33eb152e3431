"""The per-guess score write as it was before group commit, kept as an oracle:
``record_scores`` must leave exactly the rows this leaves, and ``bench_store`` measures its
speed against it. Not used by the game.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from codemojex.store._sql import dump_list, upsert_insert
from codemojex.store.models import RoundPointsRow, ScoreRow, TotalRow
from codemojex.store.records import ScoreRecord

__all__ = ["legacy_record_score"]


async def legacy_record_score(engine: AsyncEngine, score: ScoreRecord) -> bool:
    """Six SQLAlchemy statements in one transaction per guess; True iff it wrote it."""
    async with engine.begin() as conn:
        inserted = await conn.execute(
            upsert_insert(conn, ScoreRow)
            .values(
                job_id=score.job_id, round_id=score.round_id, player_id=score.player_id,
                seq=score.seq, guess=dump_list(score.guess), exact=score.exact,
                near=score.near, solved=score.solved, points=score.points,
                accepted_at_ms=score.accepted_at_ms, scored_at_ms=score.scored_at_ms,
                attempts=score.attempts, worker_id=score.worker_id,
            )
            .on_conflict_do_nothing(index_elements=["job_id"])
            .returning(ScoreRow.job_id)
        )  # fmt: skip
        if inserted.first() is None:
            return False
        await _lock_totals(conn, score.player_id, score.accepted_at_ms)
        await _raise_round_points(conn, score)
        await _refresh_totals(conn, score.player_id)
    return True


async def _lock_totals(conn: AsyncConnection, player_id: str, now_ms: int) -> None:
    await conn.execute(
        upsert_insert(conn, TotalRow)
        .values(player_id=player_id, points=0, solved_rounds=0, reached_at_ms=now_ms)
        .on_conflict_do_nothing(index_elements=["player_id"])
    )
    await conn.execute(
        select(TotalRow.player_id).where(TotalRow.player_id == player_id).with_for_update()
    )


async def _raise_round_points(conn: AsyncConnection, score: ScoreRecord) -> None:
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
    rp = RoundPointsRow
    paid = rp.points > 0
    agg: Any = (
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
