"""The durable floor: SQL storage for players, rounds, scores, standings and dead jobs.

    engine = make_engine(url)          # sqlite+aiosqlite (default) or postgresql+asyncpg
    await migrate_async(url)           # alembic upgrade head (sync: migrate(url))
    wrote = await record_score(engine, ScoreRecord(...))   # idempotent on the JOB id
    written = await record_scores(engine, records)         # a batch, one transaction
    wrote = await GroupCommit(engine).write(record)        # concurrent writers share commits

Every function takes the :class:`~sqlalchemy.ext.asyncio.AsyncEngine`, runs its own short
transaction and returns plain records, never ORM objects.
"""

from __future__ import annotations

from codemojex.store.db import (
    SQLITE_FILENAME,
    alembic_config,
    make_engine,
    migrate,
    migrate_async,
    migrations_dir,
    normalize_url,
    sqlite_url,
)
from codemojex.store.dead import (
    Death,
    delete_dead,
    get_dead,
    list_dead,
    mark_dead_retried,
    upsert_dead,
    upsert_dead_many,
)
from codemojex.store.group_commit import GroupCommit, GroupCommitClosed
from codemojex.store.records import DeadJob, Player, Round, ScoreRecord
from codemojex.store.repo import (
    create_player,
    get_player,
    get_round,
    hash_token,
    latest_round,
    leaderboard,
    player_by_token_hash,
    player_names,
    round_solvers,
    save_round,
)
from codemojex.store.scores import (
    check_writable,
    record_score,
    record_scores,
    score_by_job,
    scores_for,
)

__all__ = [
    "SQLITE_FILENAME",
    "DeadJob",
    "Death",
    "GroupCommit",
    "GroupCommitClosed",
    "Player",
    "Round",
    "ScoreRecord",
    "alembic_config",
    "check_writable",
    "create_player",
    "delete_dead",
    "get_dead",
    "get_player",
    "get_round",
    "hash_token",
    "latest_round",
    "leaderboard",
    "list_dead",
    "make_engine",
    "mark_dead_retried",
    "migrate",
    "migrate_async",
    "migrations_dir",
    "normalize_url",
    "player_by_token_hash",
    "player_names",
    "record_score",
    "record_scores",
    "round_solvers",
    "save_round",
    "score_by_job",
    "scores_for",
    "sqlite_url",
    "upsert_dead",
    "upsert_dead_many",
]
