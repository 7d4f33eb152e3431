"""``ConsumerOptions``: a consumer's settings, declared once, checked once, with the values
that follow from them."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .. import checks
from ..ids import worker_id as mint_worker_id
from ..stalled import pulse_gap_ms

Source = Literal["lanes", "jobs"]

# The default of a field __post_init__ fills in: its type is what it holds once built.
DERIVED: Any = None


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """A consumer's settings (each argument is described on :class:`~echomq.Consumer`).
    Building one checks them: ``TypeError`` for a wrong type, ``ValueError`` for a value out
    of range."""

    lease_ms: int = 10_000
    concurrency: int = 1
    worker_id: str = DERIVED
    source: Source = "lanes"
    batch: int = 32
    prefetch: int = 0
    heartbeat_ms: int = DERIVED
    lapse_ms: int = 3_000
    reap_interval_ms: int = 1_000
    park_max_ms: int = 15_000
    idle_heartbeat_ms: int = 5_000
    grace_ms: int = DERIVED
    reaper: bool = True
    timeout_ms: int | None = None
    probe_max_ms: int = 1_000
    idle_lapse_ms: int = field(init=False)
    reap_lock_ms: int = field(init=False)
    pulse_gap_ms: int = field(init=False)
    suspect_ms: int = field(init=False)

    def __post_init__(self) -> None:
        for name in (
            "lease_ms",
            "concurrency",
            "batch",
            "prefetch",
            "lapse_ms",
            "reap_interval_ms",
            "park_max_ms",
            "idle_heartbeat_ms",
            "probe_max_ms",
        ):
            checks.integer(name, getattr(self, name))
        checks.optional_integer("heartbeat_ms", self.heartbeat_ms, at_least=1)
        checks.optional_integer("timeout_ms", self.timeout_ms, at_least=1)
        if not 10 <= self.probe_max_ms <= 5_000:
            raise ValueError("probe_max_ms must be between 10 and 5000")
        checks.optional_integer("grace_ms", self.grace_ms, at_least=0)
        checks.optional_name("worker_id", self.worker_id)
        if self.concurrency < 1 or self.batch < 1 or self.lease_ms < 100 or self.prefetch < 0:
            raise ValueError("concurrency and batch must be >= 1, prefetch >= 0, lease_ms >= 100")
        if self.source not in ("lanes", "jobs"):
            raise ValueError("source must be 'lanes' or 'jobs'")
        lapse, interval = self.lapse_ms, self.reap_interval_ms
        # A beat must land well inside the lapse, or the reaper takes a live worker's jobs
        # between two beats.
        beat = max(10, min(1_000, lapse // 3)) if self.heartbeat_ms is None else self.heartbeat_ms
        if beat >= lapse:
            raise ValueError("heartbeat_ms must be shorter than lapse_ms")
        if self.park_max_ms < 10 or interval < 1:
            raise ValueError("park_max_ms must be >= 10, reap_interval_ms >= 1")
        idle_beat = max(beat, self.idle_heartbeat_ms)
        lease, timeout = self.lease_ms, self.timeout_ms
        derived = {
            "worker_id": self.worker_id or mint_worker_id(),
            "heartbeat_ms": beat,
            "idle_heartbeat_ms": idle_beat,
            # Room for two lost idle beats, and never shorter than the busy lapse.
            "idle_lapse_ms": max(lapse, 3 * idle_beat),
            # Outlives the longest pause between two turns of its holder by one interval:
            # a reaper that dies is replaced within lapse + interval.
            "reap_lock_ms": max(interval, lapse) + interval,
            "pulse_gap_ms": pulse_gap_ms(lapse, beat, interval),
            "grace_ms": lease if self.grace_ms is None else self.grace_ms,
            "suspect_ms": lease if timeout is None else min(lease, timeout),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


# The keyword arguments a Consumer passes on to ConsumerOptions.
OPTION_NAMES = tuple(f.name for f in fields(ConsumerOptions) if f.init)
