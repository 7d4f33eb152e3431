"""SQLAlchemy models of the durable floor: the tables the migrations create.

Times are epoch milliseconds on the Valkey server clock (passed in, never read here).
Ids are branded ULIDs (``PLR_``, ``RND_``, ``JOB_``). Lists (palette, secret, guess) are
stored as JSON text so the schema is the same on SQLite and PostgreSQL.

These classes are the storage layer's own; the rest of the game talks to
:mod:`codemojex.store.repo` and gets plain records back.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "DeadJobRow",
    "PlayerRow",
    "RoundPointsRow",
    "RoundRow",
    "ScoreRow",
    "TotalRow",
]

# Deterministic constraint names, identical on every backend, so migrations can drop them
# by name and `alembic check` compares like with like.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Branded ids are 30 characters; leave room for ids minted elsewhere (the plain queue
# accepts caller-chosen job ids, and those can die into dead_jobs).
_ID = String(64)
_MS = BigInteger


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class PlayerRow(Base):
    __tablename__ = "players"

    player_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    name: Mapped[str] = mapped_column(String(32))
    # sha256 hex of the bearer token: a leaked database does not leak usable tokens.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at_ms: Mapped[int] = mapped_column(_MS)


class RoundRow(Base):
    __tablename__ = "rounds"

    round_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    length: Mapped[int] = mapped_column(Integer)
    palette: Mapped[str] = mapped_column(Text)  # JSON list of emojis
    secret: Mapped[str] = mapped_column(Text)  # JSON list of emojis
    opens_at_ms: Mapped[int] = mapped_column(_MS, index=True)
    closes_at_ms: Mapped[int] = mapped_column(_MS)


class ScoreRow(Base):
    """One scored guess. The JOB id is the key, which is what makes scoring idempotent."""

    __tablename__ = "scores"
    __table_args__ = (
        Index("ix_scores_round_player", "round_id", "player_id", "seq"),
        Index("ix_scores_player", "player_id"),
    )

    job_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    round_id: Mapped[str] = mapped_column(_ID, ForeignKey("rounds.round_id"))
    player_id: Mapped[str] = mapped_column(_ID, ForeignKey("players.player_id"))
    seq: Mapped[int] = mapped_column(Integer)
    guess: Mapped[str] = mapped_column(Text)  # JSON list of emojis
    exact: Mapped[int] = mapped_column(Integer)
    near: Mapped[int] = mapped_column(Integer)
    solved: Mapped[bool] = mapped_column(Boolean)
    points: Mapped[int] = mapped_column(Integer)
    accepted_at_ms: Mapped[int] = mapped_column(_MS)
    scored_at_ms: Mapped[int] = mapped_column(_MS)
    # The fencing token (EchoMQ attempts) under which this score was written.
    attempts: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[str] = mapped_column(_ID)


class RoundPointsRow(Base):
    """A player's standing in one round: the best of their scored guesses.

    "Best" is the greatest ``(points, -seq, -job_id)``: most points, then the earliest
    guess. It is a maximum over the scored set, so it does not depend on scoring order.
    """

    __tablename__ = "round_points"
    __table_args__ = (Index("ix_round_points_round", "round_id"),)

    player_id: Mapped[str] = mapped_column(_ID, ForeignKey("players.player_id"), primary_key=True)
    round_id: Mapped[str] = mapped_column(_ID, ForeignKey("rounds.round_id"), primary_key=True)
    points: Mapped[int] = mapped_column(Integer)
    best_seq: Mapped[int] = mapped_column(Integer)
    best_job_id: Mapped[str] = mapped_column(_ID)
    # accepted_at of the best guess: when the player reached these points.
    reached_at_ms: Mapped[int] = mapped_column(_MS)


class TotalRow(Base):
    """A player's all-time standing, derived from their ``round_points`` rows."""

    __tablename__ = "totals"

    player_id: Mapped[str] = mapped_column(_ID, ForeignKey("players.player_id"), primary_key=True)
    points: Mapped[int] = mapped_column(Integer)
    solved_rounds: Mapped[int] = mapped_column(Integer)
    # When the player reached this total (latest reached_at of a round that paid), or,
    # for a player with no points yet, when they first had a guess scored.
    reached_at_ms: Mapped[int] = mapped_column(_MS)


class DeadJobRow(Base):
    """A job EchoMQ gave up on, kept so an operator can retry or discard it."""

    __tablename__ = "dead_jobs"

    job_id: Mapped[str] = mapped_column(_ID, primary_key=True)
    queue: Mapped[str] = mapped_column(Text)
    lane: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)  # the job's payload as JSON text
    error: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer)
    died_at_ms: Mapped[int] = mapped_column(_MS)
    retried_at_ms: Mapped[int | None] = mapped_column(_MS)
    discarded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
