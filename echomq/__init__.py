"""EchoMQ: a reliable job queue on Valkey. It knows nothing of games.

Semantics, plainly:

* **At-least-once delivery.** A job is leased, not popped: a claim moves it to the
  ``active`` set under a lease that ends at the server's ``TIME`` + ``lease_ms``. A
  holder that dies (its lease expires, or its heartbeat lapses — 3 s by default) loses
  the job back to its lane, and someone else gets it. So a job may run more than once:
  **effects must be idempotent** — key them on the job id.
* **Fencing.** Every claim increments the job's ``attempts``; that number is the token.
  complete / fail / extend / release with any other token, or on a job that is not
  active, change nothing and say so (False / "stale"). A presumed-dead worker's late
  completion is a no-op. ``attempts`` counts deliveries: a release leaves it (the job is
  pending, so the old token is refused by state) and the next claim carries token + 1. A
  completion repeated with its own token (a batch re-sent after a lost reply) says True
  again and counts nothing twice.
* **Arguments are checked first.** A wrong type (``TypeError``) or a value out of range
  (``ValueError``) at any public call is refused before anything is sent.
* **One script per transition.** Row, sets, counters and the event move together in one
  Lua script, or not at all; no script writes before its last check that can fail.
* **Server clock only.** Leases, due times and reaping are judged on Valkey's ``TIME``.
* **Admission in the enqueue.** ``q.lanes.submit`` checks, in one script and before any
  write: an existing id, a dedup key (same fingerprint -> the original receipt, another ->
  ``DedupConflict``), a deadline, a token-bucket rate per subject on the server clock
  (``RateLimited``) and a cap of unfinished jobs per subject (``LaneFull``).
* **Fair lanes.** ``q.lanes`` keeps one FIFO per lane and claims in fair order: a lane
  that was empty when its job arrived first (one job per activation), the lanes that stay
  non-empty round-robin, the two alternating; neither kind starves (bounds in claims in
  ``q.lanes``' docstring), so a lane with 100,000 jobs cannot starve a lane with one.
* **Retries** back off exponentially (0.5 s × 2^(failures−1), ±20 %, capped at 60 s
  jitter included)
  through ``scheduled``; a job out of deliveries (failures + lease expiries reach
  ``max_attempts``, default 5) goes to ``dead`` with its reason.
* **No busy-polling.** Idle consumers park on the wake key with BLPOP, beat rarely, and
  one reaper per queue (under a ``SET NX PX`` lock) reaps when something can come due:
  an idle consumer sends under one command a second.
* **Headers beside the payload.** A job may carry a few str -> str headers (a trace
  context: ``traceparent``), given at enqueue and handed back with every claim
  (``Claim.headers``); none given, nothing is stored.
* **Errors are survived.** A consumer's loops ride out any server error (``OOM``,
  ``READONLY``, a lost connection) with backoff; a result JSON cannot carry fails its job.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .connection import connect
from .consumer import Consumer, Handler
from .errors import (
    TRANSIENT,
    DeadlinePassed,
    DedupConflict,
    EchoMQError,
    InvalidState,
    JobNotFound,
    LaneFull,
    NotDurable,
    NotReplicated,
    RateLimited,
    Retry,
    ServerError,
    Unavailable,
)
from .events import Tail
from .hooks import Hooks
from .ids import branded, is_branded, job_id, ulid, worker_id
from .keys import Keys
from .lanes import Dedup
from .partitions import Partitioned, PartitionedConsumer
from .queue import Queue
from .registry import WorkerRecord
from .scripts import Script
from .settings import Settings
from .types import Claim, ClaimBatch, Enqueued, Event, JobInfo, QueueStats, Token, WorkerInfo

try:
    __version__ = _version("echomq")  # one home: echomq/pyproject.toml
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "TRANSIENT",
    "Claim",
    "ClaimBatch",
    "Consumer",
    "DeadlinePassed",
    "Dedup",
    "DedupConflict",
    "EchoMQError",
    "Enqueued",
    "Event",
    "Handler",
    "Hooks",
    "InvalidState",
    "JobInfo",
    "JobNotFound",
    "Keys",
    "LaneFull",
    "NotDurable",
    "NotReplicated",
    "Partitioned",
    "PartitionedConsumer",
    "Queue",
    "QueueStats",
    "RateLimited",
    "Retry",
    "Script",
    "ServerError",
    "Settings",
    "Tail",
    "Token",
    "Unavailable",
    "WorkerInfo",
    "WorkerRecord",
    "branded",
    "connect",
    "is_branded",
    "job_id",
    "ulid",
    "worker_id",
]
