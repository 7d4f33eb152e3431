"""initial: players, rounds, scores, round_points, totals, dead_jobs

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.String(length=64)


def upgrade() -> None:
    op.create_table(
        "players",
        sa.Column("player_id", _ID, nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("player_id", name=op.f("pk_players")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_players_token_hash")),
    )
    op.create_table(
        "rounds",
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("palette", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("opens_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("closes_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("round_id", name=op.f("pk_rounds")),
    )
    op.create_index(op.f("ix_rounds_opens_at_ms"), "rounds", ["opens_at_ms"])
    op.create_table(
        "scores",
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("player_id", _ID, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("guess", sa.Text(), nullable=False),
        sa.Column("exact", sa.Integer(), nullable=False),
        sa.Column("near", sa.Integer(), nullable=False),
        sa.Column("solved", sa.Boolean(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("accepted_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("scored_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", _ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["player_id"], ["players.player_id"], name=op.f("fk_scores_player_id_players")
        ),
        sa.ForeignKeyConstraint(
            ["round_id"], ["rounds.round_id"], name=op.f("fk_scores_round_id_rounds")
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_scores")),
    )
    op.create_index("ix_scores_round_player", "scores", ["round_id", "player_id", "seq"])
    op.create_index("ix_scores_player", "scores", ["player_id"])
    op.create_table(
        "round_points",
        sa.Column("player_id", _ID, nullable=False),
        sa.Column("round_id", _ID, nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("best_seq", sa.Integer(), nullable=False),
        sa.Column("best_job_id", _ID, nullable=False),
        sa.Column("reached_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["player_id"], ["players.player_id"], name=op.f("fk_round_points_player_id_players")
        ),
        sa.ForeignKeyConstraint(
            ["round_id"], ["rounds.round_id"], name=op.f("fk_round_points_round_id_rounds")
        ),
        sa.PrimaryKeyConstraint("player_id", "round_id", name=op.f("pk_round_points")),
    )
    op.create_index("ix_round_points_round", "round_points", ["round_id"])
    op.create_table(
        "totals",
        sa.Column("player_id", _ID, nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("solved_rounds", sa.Integer(), nullable=False),
        sa.Column("reached_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["player_id"], ["players.player_id"], name=op.f("fk_totals_player_id_players")
        ),
        sa.PrimaryKeyConstraint("player_id", name=op.f("pk_totals")),
    )
    op.create_table(
        "dead_jobs",
        sa.Column("job_id", _ID, nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("lane", sa.Text(), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("died_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("retried_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("discarded", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_dead_jobs")),
    )


def downgrade() -> None:
    # Children before parents, so the foreign keys never dangle.
    op.drop_table("dead_jobs")
    op.drop_table("totals")
    op.drop_index("ix_round_points_round", table_name="round_points")
    op.drop_table("round_points")
    op.drop_index("ix_scores_player", table_name="scores")
    op.drop_index("ix_scores_round_player", table_name="scores")
    op.drop_table("scores")
    op.drop_index(op.f("ix_rounds_opens_at_ms"), table_name="rounds")
    op.drop_table("rounds")
    op.drop_table("players")
