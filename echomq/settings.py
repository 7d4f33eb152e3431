"""A queue's tunables, with the defaults the contract states."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Settings:
    keep_completed: int = 10_000  # completed rows retained for get(); older ones are trimmed
    keep_completed_ms: int = 3_600_000
    events_maxlen: int = 100_000  # approximate cap of the events stream
    backoff_ms: int = 500  # first retry after 0.5 s, doubling per failure
    backoff_cap_ms: int = 60_000
    jitter: float = 0.2  # ±20 %
    seq_ttl_ms: int = 86_400_000  # lifetime of a (lane, scope) sequence counter
    promote_limit: int = 100  # due scheduled jobs moved per claim or reap
    # Durability of an enqueue beyond the master's own AOF: with replicas = N > 0 an enqueue
    # returns only once WAIT saw N replicas acknowledge it within replica_timeout_ms, and
    # raises NotReplicated otherwise (the job may exist, unconfirmed). 0: no WAIT.
    replicas: int = 0
    replica_timeout_ms: int = 1_000

    def __post_init__(self) -> None:
        for name in ("replicas", "replica_timeout_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if self.replicas < 0:
            raise ValueError("replicas must be >= 0")
        if self.replica_timeout_ms < 1:  # WAIT n 0 would block for ever
            raise ValueError("replica_timeout_ms must be >= 1")
