"""The shapes the game hands to the web layer (and the web layer to clients as JSON),
typed: what ``../shared/CONTRACT.md`` §4 documents, checked by mypy where they are built
instead of living as ``dict[str, Any]``."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class Solver(TypedDict):
    player_id: str
    name: str
    seq: int


class RoundView(TypedDict):
    round_id: str
    length: int
    palette: list[str]
    opens_at: int
    closes_at: int
    state: Literal["open", "closed"]
    secret: NotRequired[list[str]]  # once closed
    solvers: NotRequired[list[Solver]]  # once closed, from SQL


class ScoreView(TypedDict):
    exact: int
    near: int
    solved: bool
    points: int


class GuessView(TypedDict):
    job_id: str
    round_id: str | None
    seq: int | None
    guess: list[str] | None
    state: str  # EchoMQ's: pending | active | scheduled | completed | dead
    attempts: int
    score: ScoreView | None


class Standing(TypedDict):
    player_id: str
    name: str
    points: int
    solved_rounds: int


class WorkerView(TypedDict):
    worker_id: str
    pid: int | None
    host: str | None
    state: str
    job_id: str | None
    lease_remaining_ms: int | None
    jobs_done: int
    alive: bool
    exit_reason: str | None
    killed_holding: list[str] | None


class LaneDepth(TypedDict):
    lane: str
    depth: int


class QueueCounters(TypedDict):
    accepted: int
    scored: int
    stale_refused: int
    reclaimed: int
    failed: int
    dead: int
    retried: int
    released: int


class QueueView(TypedDict):
    pending: int
    active: int
    scheduled: int
    completed: int
    dead: int
    lanes: list[LaneDepth]  # the first 1,000 non-empty lanes, deepest first
    lane_count: int  # every non-empty lane
    counters: QueueCounters


class DeadJobView(TypedDict):
    job_id: str
    lane: str | None
    payload: Any
    error: str | None
    reason: str | None
    attempts: int
    died_at: int
    retried_at: int | None
