"""Players, rounds and standings on the durable floor.

Every function takes an :class:`AsyncEngine`, runs one short transaction and returns plain
records (:mod:`codemojex.store.records`) or dicts shaped for the API.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import case, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store._sql import dump_list, first_row, load_list, upsert_insert
from codemojex.store.models import PlayerRow, RoundPointsRow, RoundRow, TotalRow
from codemojex.store.records import Player, Round
from codemojex.views import Solver, Standing
from echomq.ids import branded

__all__ = [
    "create_player",
    "get_player",
    "get_round",
    "hash_token",
    "latest_round",
    "leaderboard",
    "player_by_token_hash",
    "player_names",
    "round_solvers",
    "save_round",
]

# Both SQLite (32766) and asyncpg (32767) cap bound parameters per statement.
_IN_CHUNK = 500


def hash_token(token: str) -> str:
    """The sha256 hex digest under which a bearer token is stored and looked up."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# --- players -------------------------------------------------------------------------


async def create_player(
    engine: AsyncEngine,
    name: str,
    token_hash: str,
    now_ms: int,
    *,
    player_id: str | None = None,
) -> Player:
    """Store a new player (``name`` already validated) and return it with its ``PLR_`` id."""
    player = Player(
        player_id=player_id or branded("PLR"),
        name=name,
        token_hash=token_hash,
        created_at_ms=now_ms,
    )
    async with engine.begin() as conn:
        await conn.execute(
            insert(PlayerRow).values(
                player_id=player.player_id,
                name=player.name,
                token_hash=player.token_hash,
                created_at_ms=player.created_at_ms,
            )
        )
    return player


async def get_player(engine: AsyncEngine, player_id: str) -> Player | None:
    row = await first_row(engine, select(PlayerRow).where(PlayerRow.player_id == player_id))
    return _player(row) if row is not None else None


async def player_by_token_hash(engine: AsyncEngine, token_hash: str) -> Player | None:
    """The player whose token hashes to ``token_hash`` (see :func:`hash_token`), if any."""
    row = await first_row(engine, select(PlayerRow).where(PlayerRow.token_hash == token_hash))
    return _player(row) if row is not None else None


async def player_names(engine: AsyncEngine, player_ids: Iterable[str]) -> dict[str, str]:
    """``{player_id: name}`` for those of ``player_ids`` that exist."""
    ids = sorted(set(player_ids))
    names: dict[str, str] = {}
    async with engine.connect() as conn:
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            result = await conn.execute(
                select(PlayerRow.player_id, PlayerRow.name).where(PlayerRow.player_id.in_(chunk))
            )
            names.update({pid: name for pid, name in result})
    return names


def _player(row: Any) -> Player:
    return Player(
        player_id=row.player_id,
        name=row.name,
        token_hash=row.token_hash,
        created_at_ms=row.created_at_ms,
    )


# --- rounds --------------------------------------------------------------------------


async def save_round(engine: AsyncEngine, rnd: Round) -> bool:
    """Store ``rnd`` unless a round with its id exists. True iff this call stored it.

    Insert-if-absent, so every process that learns of a new round may save it.
    """
    async with engine.begin() as conn:
        stmt = (
            upsert_insert(conn, RoundRow)
            .values(
                round_id=rnd.round_id,
                length=rnd.length,
                palette=dump_list(rnd.palette),
                secret=dump_list(rnd.secret),
                opens_at_ms=rnd.opens_at_ms,
                closes_at_ms=rnd.closes_at_ms,
            )
            .on_conflict_do_nothing(index_elements=["round_id"])
            .returning(RoundRow.round_id)
        )
        return (await conn.execute(stmt)).first() is not None


async def get_round(engine: AsyncEngine, round_id: str) -> Round | None:
    row = await first_row(engine, select(RoundRow).where(RoundRow.round_id == round_id))
    return _round(row) if row is not None else None


async def latest_round(engine: AsyncEngine) -> Round | None:
    """The round that opened last (ties: the greater id, i.e. the later minted)."""
    row = await first_row(
        engine,
        select(RoundRow).order_by(RoundRow.opens_at_ms.desc(), RoundRow.round_id.desc()).limit(1),
    )
    return _round(row) if row is not None else None


def _round(row: Any) -> Round:
    return Round(
        round_id=row.round_id,
        length=row.length,
        palette=load_list(row.palette),
        secret=load_list(row.secret),
        opens_at_ms=row.opens_at_ms,
        closes_at_ms=row.closes_at_ms,
    )


# --- standings -----------------------------------------------------------------------


async def leaderboard(
    engine: AsyncEngine, limit: int = 100, round_id: str | None = None
) -> list[Standing]:
    """The leaderboard: ``[{"player_id", "name", "points", "solved_rounds"}, …]``.

    All-time (``round_id=None``): every player with a scored guess, by total points, ties
    broken by who reached their total first. For one round: every player with a scored
    guess in it, by their points in it, ties broken by who reached them first
    (``solved_rounds`` is then 1 or 0).
    """
    if round_id is None:
        stmt = (
            select(PlayerRow.player_id, PlayerRow.name, TotalRow.points, TotalRow.solved_rounds)
            .join(PlayerRow, PlayerRow.player_id == TotalRow.player_id)
            .order_by(TotalRow.points.desc(), TotalRow.reached_at_ms, TotalRow.player_id)
        )
    else:
        rp = RoundPointsRow
        stmt = (
            select(
                PlayerRow.player_id,
                PlayerRow.name,
                rp.points,
                case((rp.points > 0, 1), else_=0).label("solved_rounds"),
            )
            .join(PlayerRow, PlayerRow.player_id == rp.player_id)
            .where(rp.round_id == round_id)
            .order_by(rp.points.desc(), rp.reached_at_ms, rp.player_id)
        )
    async with engine.connect() as conn:
        result = await conn.execute(stmt.limit(limit))
        return [cast(Standing, dict(row)) for row in result.mappings()]


async def round_solvers(engine: AsyncEngine, round_id: str) -> list[Solver]:
    """Who solved ``round_id``, in acceptance order of their solving guess.

    ``[{"player_id", "name", "seq"}, …]`` where ``seq`` is that of the earliest solving
    guess. Ties in acceptance time fall back to the JOB id, which is mint-ordered.
    """
    rp = RoundPointsRow
    stmt = (
        select(PlayerRow.player_id, PlayerRow.name, rp.best_seq.label("seq"))
        .join(PlayerRow, PlayerRow.player_id == rp.player_id)
        .where(rp.round_id == round_id, rp.points > 0)
        .order_by(rp.reached_at_ms, rp.best_job_id)
    )
    async with engine.connect() as conn:
        return [cast(Solver, dict(row)) for row in (await conn.execute(stmt)).mappings()]
