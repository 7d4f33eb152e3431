"""The values EchoMQ hands back: claims, job snapshots, enqueue receipts, events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol, Self, TypedDict

from .checks import DEFAULT_MAX_ATTEMPTS
from .codec import loads, number, text

State = Literal["pending", "active", "scheduled", "completed", "dead", "cancelled"]
# The states a job never leaves (but by an operator's retry of a dead one).
FINISHED: frozenset[State] = frozenset({"completed", "dead", "cancelled"})
FailOutcome = Literal["scheduled", "dead", "stale"]

# One shared, read-only empty mapping: a claim without headers costs no allocation.
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def decode_headers(raw: bytes | str | None) -> Mapping[str, str]:
    """A job row's ``headers`` field (a JSON object, absent when none were given)."""
    if not raw:
        return NO_HEADERS
    value = loads(raw)
    if not isinstance(value, dict):
        return NO_HEADERS  # a hand-edited row: no headers rather than a failed claim
    return {str(k): str(v) for k, v in value.items()}


class Token(int):
    """A fencing token: an ``int`` equal to the row's ``attempts`` after the claim, carrying
    ``lease``, the id of the claim call. ``attempts`` alone can be issued twice after data
    loss (a claim lost to an ``everysec`` crash or a failover); the lease, minted by the
    client, still tells the old holder apart. A bare ``int`` is checked on attempts only."""

    lease: str

    def __new__(cls, attempts: int, lease: str = "") -> Self:
        self = super().__new__(cls, attempts)
        self.lease = lease
        return self

    @property
    def attempts(self) -> int:
        return int(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Token, (int(self), self.lease))


class ProgressSink(Protocol):
    """Where a claim's progress goes: its queue's ``Jobs``."""

    async def progress(self, job_id: str, token: int, value: Any) -> bool: ...


def lease_of(token: int) -> str:
    """The lease id a token names ('' for a bare int)."""
    return token.lease if isinstance(token, Token) else ""


@dataclass(frozen=True, slots=True)
class Claim:
    """One leased job. ``token`` is the fencing token: pass it back to complete, fail,
    extend or release; it stops working the moment the job is reclaimed. It is a
    :class:`Token`: an ``int`` equal to the job's ``attempts``, naming its lease too."""

    job_id: str
    lane: str | None
    payload: Any
    token: Token
    lease_until_ms: int
    seq: int | None = None
    enqueued_at_ms: int = 0
    stalls: int = 0  # deliveries whose holder was presumed dead: it may kill its worker
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    # The queue's jobs, for progress(): one reference, no copy per claim.
    sink: ProgressSink | None = field(default=None, compare=False, repr=False)

    async def progress(self, value: Any) -> bool:
        """Record how far the handler got (a JSON value, at most
        ``echomq.results.MAX_PROGRESS_BYTES``): shown as ``JobInfo.progress`` and appended
        to the events stream as ``progress``. False when this claim no longer holds the job
        (reclaimed or cancelled): nothing changed."""
        if self.sink is None:
            raise RuntimeError("this claim was not handed out by a queue: no progress to record")
        return await self.sink.progress(self.job_id, self.token, value)

    @classmethod
    def from_reply(cls, row: list[Any], sink: ProgressSink | None = None) -> Claim:
        lane = text(row[1])
        seq = text(row[5])
        return cls(
            job_id=text(row[0]),
            lane=lane or None,
            payload=loads(row[2]),
            token=Token(int(row[3]), text(row[9]) if len(row) > 9 else ""),
            lease_until_ms=int(row[4]),
            seq=int(seq) if seq else None,
            enqueued_at_ms=number(row[6]),
            stalls=number(row[7]),
            headers=decode_headers(row[8]) if len(row) > 8 else NO_HEADERS,
            sink=sink,
        )


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    claims: list[Claim]
    server_now_ms: int
    next_due_ms: int | None  # the earliest scheduled job, so a parked consumer wakes for it


@dataclass(frozen=True, slots=True)
class Enqueued:
    """Receipt of a lane enqueue. ``created`` is False when the id already existed (a
    replay): nothing was enqueued and ``seq`` is the original one."""

    job_id: str
    seq: int | None
    created: bool


@dataclass(frozen=True, slots=True)
class JobInfo:
    job_id: str
    state: State
    attempts: int
    lane: str | None
    payload: Any
    result: Any
    error: str | None
    reason: str | None
    lease_until_ms: int | None
    failures: int = 0
    stalls: int = 0
    max_attempts: int = 0
    seq: int | None = None
    enqueued_at_ms: int = 0
    worker_id: str | None = None
    finished_at_ms: int | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    progress: Any = None  # the last value its handler reported (Claim.progress)
    # The tick a schedule enqueued this job for (server clock); None for any other job.
    scheduled_for_ms: int | None = None

    @classmethod
    def from_hash(cls, row: dict[Any, Any], job_id: str = "") -> JobInfo:
        """The job ``job_id`` from its row (HGETALL); zero counts and a pending state are
        not written. ``id`` and ``payload``: an older row's fields, still read."""

        def g(name: str) -> str:
            return text(row.get(name.encode(), row.get(name)))

        lease, done, seq = g("lease"), g("done"), g("seq")
        return cls(
            job_id=job_id or g("id"),
            state=g("state") or "pending",  # type: ignore[arg-type]  # pending: no field
            attempts=number(g("attempts")),
            lane=g("lane") or None,
            payload=loads(g("body") or g("payload")),
            result=loads(g("result")) if g("result") else None,
            error=g("error") or None,
            reason=g("reason") or None,
            lease_until_ms=int(lease) if lease else None,
            failures=number(g("failures")),
            stalls=number(g("stalls")),
            max_attempts=number(g("max")) if g("max") else DEFAULT_MAX_ATTEMPTS,
            seq=int(seq) if seq else None,
            enqueued_at_ms=number(g("enq")),
            worker_id=g("worker") or None,
            finished_at_ms=int(done) if done else None,
            headers=decode_headers(g("headers")),
            progress=loads(g("progress")) if g("progress") else None,
            scheduled_for_ms=int(g("tick")) if g("tick") else None,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the events stream; ``fields`` holds everything but id and type."""

    event_id: str
    type: str
    job_id: str
    fields: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, event_id: Any, raw: dict[Any, Any]) -> Event:
        fields = {text(k): text(v) for k, v in raw.items()}
        return cls(text(event_id), fields.pop("type", ""), fields.pop("job_id", ""), fields)

    @property
    def result(self) -> Any:
        return loads(self.fields.get("result"))

    @property
    def progress(self) -> Any:
        """A ``progress`` event's value (None for other types)."""
        return loads(self.fields.get("progress"))


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as the registry knows it. ``alive``: registered (its heartbeat deadline,
    ``deadline_ms`` on the server clock, not found lapsed, and not stopped). The other fields
    come from its last self-description, None (or empty) where the row lacks them; ``meta``
    is the whole row as stored."""

    worker_id: str
    alive: bool
    deadline_ms: int | None
    meta: dict[str, str]
    state: str | None = None
    pid: int | None = None
    host: str | None = None
    jobs: tuple[str, ...] = ()
    jobs_done: int = 0
    beat_ms: int | None = None
    lapse_ms: int | None = None
    lapsed_ms: int | None = None
    stopped_ms: int | None = None
    waiting_for: str | None = None

    @classmethod
    def from_row(cls, worker_id: str, deadline_ms: int | None, raw: Mapping[Any, Any]) -> Self:
        """From the worker's hash (bytes or str fields) and its registry score."""
        row = {text(k): text(v) for k, v in raw.items()}
        return cls(
            worker_id=worker_id,
            alive=deadline_ms is not None,
            deadline_ms=deadline_ms,
            meta=row,  # a dict, not a read-only proxy: dataclasses.asdict copies it
            state=row.get("state") or None,
            pid=_integer(row.get("pid")),
            host=row.get("host") or None,
            jobs=tuple(j for j in row.get("jobs", "").split(",") if j),
            jobs_done=_integer(row.get("jobs_done")) or 0,
            beat_ms=_integer(row.get("beat")),
            lapse_ms=_integer(row.get("lapse_ms")),
            lapsed_ms=_integer(row.get("lapsed")),
            stopped_ms=_integer(row.get("stopped")),
            waiting_for=row.get("waiting_for") or None,
        )


def _integer(raw: str | None) -> int | None:
    # A field another program wrote by hand may not be a number: unknown, not an error.
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


class QueueStats(TypedDict):
    """``Queue.stats()``: one consistent snapshot of where the queue's jobs are."""

    pending: int  # plain pending + waiting in lanes
    active: int
    scheduled: int
    completed: int  # rows retained
    dead: int
    lanes: dict[str, int]  # the first max_lanes non-empty lanes -> depth, served next first
    counters: dict[str, int]  # cumulative: enqueued, claimed, completed, reaped, outages, …
    refused: dict[str, int]  # stale calls refused, by operation
    server_now_ms: int
    lane_count: int  # every non-empty lane
    paused: bool  # Queue.pause: claims hand out nothing until Queue.resume
