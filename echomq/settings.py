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
