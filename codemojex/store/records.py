"""Plain, immutable records the store hands out and takes in.

Callers never hold an ORM object or a session: every repository function opens its own
transaction and returns one of these.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeadJob", "Player", "Round", "ScoreRecord"]


@dataclass(frozen=True, slots=True)
class Player:
    player_id: str
    name: str
    token_hash: str
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class Round:
    """A round as stored; times are epoch ms on the Valkey server clock."""

    round_id: str
    length: int
    palette: tuple[str, ...]
    secret: tuple[str, ...]
    opens_at_ms: int
    closes_at_ms: int


@dataclass(frozen=True, slots=True)
class ScoreRecord:
    """One scored guess, keyed on the JOB id that carried it.

    ``attempts`` is the EchoMQ fencing token the worker held when it scored the guess.
    """

    job_id: str
    round_id: str
    player_id: str
    seq: int
    guess: tuple[str, ...]
    exact: int
    near: int
    solved: bool
    points: int
    accepted_at_ms: int
    scored_at_ms: int
    attempts: int
    worker_id: str


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A job on the durable floor. ``payload`` is the job's payload as JSON text."""

    job_id: str
    queue: str
    lane: str | None
    payload: str
    error: str | None
    reason: str | None
    attempts: int
    died_at_ms: int
    retried_at_ms: int | None
    discarded: bool
