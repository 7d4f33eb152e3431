"""The shapes the game hands to the web layer (and the web layer to clients as JSON),
typed: what docs/contract.md §4 documents, checked by mypy where they are built
instead of living as ``dict[str, Any]``.

They are also the one statement of the HTTP answers' shapes: web/openapi.py generates
its components' schemas from them (codemojex.json_schema). What a type alone does not
say, an id's pattern, a description, the values a ``str`` takes, is an ``Annotated``
:class:`~codemojex.json_schema.Schema`, which mypy reads as the plain type."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from codemojex.json_schema import Schema


def _branded(prefix: str) -> Schema:
    """echomq.ids: ``PREFIX_`` and a ULID (its first character 0-7: 48 bits of ms)."""
    return Schema(pattern=f"^{prefix}_[0-7][0-9A-HJKMNP-TV-Z]{{25}}$")


PlayerId = Annotated[str, _branded("PLR")]
RoundId = Annotated[str, _branded("RND")]
JobId = Annotated[str, _branded("JOB")]
EpochMs = Annotated[int, Schema(description="epoch milliseconds, Valkey server clock")]
# The contract's closed set of error codes (docs/contract.md §4), each answer's "error".
ERROR_CODES = (
    "invalid_body",
    "invalid_guess",
    "unauthorized",
    "forbidden",
    "not_found",
    "round_closed",
    "body_too_large",
    "method_not_allowed",
    "request_timeout",
    "lane_full",
    "rate_limited",
    "idempotency_conflict",
    "conflict",
    "unavailable",
    "overloaded",
)
JOB_STATES = ("pending", "active", "scheduled", "completed", "dead")  # EchoMQ's
WORKER_STATES = ("idle", "scoring", "waiting", "dead")


class Solver(TypedDict):
    player_id: PlayerId
    name: str
    seq: int


class RoundView(TypedDict):
    round_id: RoundId
    length: int
    palette: list[str]
    opens_at: EpochMs
    closes_at: EpochMs
    state: Literal["open", "closed"]
    secret: NotRequired[Annotated[list[str], Schema(description="closed rounds only")]]
    solvers: NotRequired[  # from SQL
        Annotated[list[Solver], Schema(description="closed rounds only, in acceptance order")]
    ]


class ScoreView(TypedDict):
    exact: int
    near: int
    solved: bool
    points: int


class GuessView(TypedDict):
    job_id: JobId
    # None only for a job whose payload lacks them (not one the game enqueued).
    round_id: RoundId | None
    seq: int | None
    guess: list[str] | None
    state: Annotated[str, Schema(enum=list(JOB_STATES))]
    attempts: int
    score: ScoreView | None


class Standing(TypedDict):
    player_id: PlayerId
    name: str
    points: int
    solved_rounds: int


class WorkerView(TypedDict):
    worker_id: str
    pid: int | None
    host: str | None
    state: Annotated[str, Schema(enum=list(WORKER_STATES))]
    job_id: str | None
    lease_remaining_ms: int | None
    jobs_done: int
    alive: bool
    exit_reason: str | None
    killed_holding: Annotated[
        list[str] | None, Schema(description="Killed by an order: the jobs it was scoring then.")
    ]


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
    lanes: Annotated[
        list[LaneDepth], Schema(description="the first 1,000 non-empty lanes, deepest first")
    ]
    lane_count: Annotated[int, Schema(description="every non-empty lane")]
    counters: QueueCounters


class DeadJobView(TypedDict):
    job_id: JobId
    lane: str | None
    payload: Annotated[Any, Schema(description="the job's payload (operators only)")]
    error: str | None
    reason: str | None
    attempts: int
    died_at: EpochMs
    retried_at: int | None


# -- the bodies the web layer wraps around them ----------------------------------------------


class ErrorBody(TypedDict):  # every error answer
    error: Annotated[str, Schema(enum=list(ERROR_CODES))]
    detail: str


class NewPlayer(TypedDict):
    player_id: PlayerId
    name: str
    token: Annotated[str, Schema(description="shown once")]


class Accepted(TypedDict):
    job_id: JobId
    seq: Annotated[int, Schema(minimum=0)]


class Guesses(TypedDict):
    guesses: list[GuessView]


class Leaderboard(TypedDict):
    players: list[Standing]


class Health(TypedDict):
    status: NotRequired[str]  # "ok"
    valkey: bool
    sql: bool


class HealthDown(ErrorBody):
    """unavailable, and which of the two did not answer"""

    valkey: bool
    sql: bool


class Workers(TypedDict):
    workers: list[WorkerView]


class WorkerId(TypedDict):
    worker_id: str


class KillOrdered(TypedDict):
    worker_id: str
    state: Literal["kill ordered"]


class DeadJobs(TypedDict):
    jobs: list[DeadJobView]


class JobState(TypedDict):
    job_id: JobId
    state: str
