"""EchoMQ's error tree. Stale calls are not errors: they return False or "stale"."""

from __future__ import annotations

import asyncio

from redis.exceptions import ClusterError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

TRANSIENT = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
    ClusterError,
    TryAgainError,
)
""""Valkey is unreachable for now": wait and retry, never crash. On a cluster also
CLUSTERDOWN, a failover (ClusterError) and a slot being migrated (TRYAGAIN)."""


class EchoMQError(Exception):
    """Base of every error EchoMQ raises."""


class JobNotFound(EchoMQError):
    """No job row with that id (never enqueued, or trimmed after completion)."""


class InvalidState(EchoMQError):
    """The job exists but is not in the state the operation needs (e.g. retry of a live job)."""


class LaneFull(EchoMQError):
    """The load subject (by default the lane) already has ``max_pending`` unfinished jobs;
    nothing was enqueued. ``lane`` names that subject."""

    def __init__(self, lane: str, limit: int) -> None:
        super().__init__(f"lane {lane!r} already has {limit} unfinished jobs")
        self.lane = lane
        self.limit = limit


class DeadlinePassed(EchoMQError):
    """The enqueue arrived after its ``deadline_ms`` on the server clock; nothing was enqueued."""

    def __init__(self, deadline_ms: int, server_now_ms: int) -> None:
        super().__init__(f"deadline {deadline_ms} passed (server clock {server_now_ms})")
        self.deadline_ms = deadline_ms
        self.server_now_ms = server_now_ms


class DedupConflict(EchoMQError):
    """The dedup key is already bound to another job with a different fingerprint;
    nothing was enqueued."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(f"dedup key {key!r} is bound to {job_id} with another fingerprint")
        self.key = key
        self.job_id = job_id


class NotReplicated(EchoMQError):
    """Fewer than ``wanted`` replicas confirmed the enqueue in time (``Settings.replicas``):
    the job may exist, or be lost if the master fails now. Enqueueing the same id again is
    a replay, which waits for the replicas again."""

    def __init__(self, job_id: str, acked: int, wanted: int) -> None:
        super().__init__(f"job {job_id}: {acked} of {wanted} replicas confirmed it in time")
        self.job_id = job_id
        self.acked = acked
        self.wanted = wanted


class RateLimited(EchoMQError):
    """The rate subject's token bucket is empty; nothing was enqueued and no token taken.
    ``retry_after_ms``: when the next token is due (server clock)."""

    def __init__(self, subject: str, retry_after_ms: int) -> None:
        super().__init__(f"{subject!r} is over its rate; next token in {retry_after_ms} ms")
        self.subject = subject
        self.retry_after_ms = retry_after_ms


class NotDurable(EchoMQError):
    """Durable mode was asked for but the server could lose acknowledged writes."""


class ServerError(EchoMQError):
    """The embedded valkey-server could not be found, started or stopped."""


class Unavailable(Exception):
    """Raise from a handler when what it needs (its database, a service) cannot be reached.

    The job is handed back, no delivery spent, and the consumer claims nothing more until a
    probe gets through. A job that keeps raising it while other jobs complete is failed at
    ``echomq.consumer.outage.HAND_BACKS`` such hand-backs."""

    def __init__(self, reason: str = "a dependency is unavailable") -> None:
        super().__init__(reason)


class Retry(Exception):
    """Raise from a handler to fail the attempt and ask for a specific retry delay."""

    def __init__(self, delay_ms: int, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay_ms = delay_ms
