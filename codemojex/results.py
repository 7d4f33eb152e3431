"""The result a ScoreWorker completes a guess with: one shape, built here and read here.

It rides on the queue's ``completed`` event, which is all a browser needs to show the
score (docs/contract.md §4), so the hub reads it back with :func:`read_score`."""

from __future__ import annotations

from typing import Any, TypedDict

from .store.records import ScoreRecord


class ScoreResult(TypedDict):
    """What a guess's job completes with."""

    player_id: str
    round_id: str
    seq: int
    guess: list[str]
    exact: int
    near: int
    solved: bool
    points: int
    worker_id: str


# What a player's socket is shown of a result, in message order (worker_id stays server-side).
SHOWN = ("round_id", "player_id", "seq", "guess", "exact", "near", "solved", "points")


def score_result(record: ScoreRecord, worker_id: str) -> ScoreResult:
    """The result of the scored guess ``record``, completed by ``worker_id``."""
    return {
        "player_id": record.player_id,
        "round_id": record.round_id,
        "seq": record.seq,
        "guess": list(record.guess),
        "exact": record.exact,
        "near": record.near,
        "solved": record.solved,
        "points": record.points,
        "worker_id": worker_id,
    }


def read_score(result: object) -> dict[str, Any] | None:
    """The shown fields of a completed job's result, or None when it is not a score.

    Results come off a stream any writer with the queue's keys can add to, so only the
    owner is required; a field that is missing reads as None, as the browser expects."""
    if not isinstance(result, dict) or not isinstance(result.get("player_id"), str):
        return None
    return {name: result.get(name) for name in SHOWN}
