"""``ConsumerOptions``: a consumer's settings, checked once and with their derived values.

Every number a :class:`~echomq.Consumer` runs on lives here, with the reasoning behind
each derived one (the heartbeat inside the lapse, the idle lapse, the reaper lock's
length, the pulse gap): the parts of a consumer read them from one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .. import checks
from ..ids import worker_id as mint_worker_id
from ..stalled import pulse_gap_ms

Source = Literal["lanes", "jobs"]


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """A consumer's validated settings (see :class:`~echomq.Consumer` for each argument);
    build one with :meth:`of`, which checks them and derives the rest."""

    lease_ms: int
    concurrency: int
    worker_id: str
    source: Source
    batch: int
    prefetch: int
    heartbeat_ms: int
    lapse_ms: int
    reap_interval_ms: int
    park_max_ms: int
    idle_heartbeat_ms: int
    idle_lapse_ms: int
    reap_lock_ms: int
    pulse_gap_ms: int
    grace_ms: int
    reaper: bool
    timeout_ms: int | None
    probe_max_ms: int
    suspect_ms: int

    @classmethod
    def of(
        cls,
        *,
        lease_ms: int = 10_000,
        concurrency: int = 1,
        worker_id: str | None = None,
        source: Source = "lanes",
        batch: int = 32,
        prefetch: int = 0,
        heartbeat_ms: int | None = None,
        lapse_ms: int = 3_000,
        reap_interval_ms: int = 1_000,
        park_max_ms: int = 15_000,
        idle_heartbeat_ms: int = 5_000,
        grace_ms: int | None = None,
        reaper: bool = True,
        timeout_ms: int | None = None,
        probe_max_ms: int = 1_000,
    ) -> ConsumerOptions:
        """Check the arguments (``TypeError`` for a wrong type, ``ValueError`` for a value
        out of range) and derive the settings that follow from them."""
        for name, value in (
            ("lease_ms", lease_ms),
            ("concurrency", concurrency),
            ("batch", batch),
            ("prefetch", prefetch),
            ("lapse_ms", lapse_ms),
            ("reap_interval_ms", reap_interval_ms),
            ("park_max_ms", park_max_ms),
            ("idle_heartbeat_ms", idle_heartbeat_ms),
            ("probe_max_ms", probe_max_ms),
        ):
            checks.integer(name, value)
        checks.optional_integer("heartbeat_ms", heartbeat_ms, at_least=1)
        checks.optional_integer("timeout_ms", timeout_ms, at_least=1)
        if not 10 <= probe_max_ms <= 5_000:
            raise ValueError("probe_max_ms must be between 10 and 5000")
        checks.optional_integer("grace_ms", grace_ms, at_least=0)
        checks.optional_name("worker_id", worker_id)
        if concurrency < 1 or batch < 1 or lease_ms < 100 or prefetch < 0:
            raise ValueError("concurrency and batch must be >= 1, prefetch >= 0, lease_ms >= 100")
        if source not in ("lanes", "jobs"):
            raise ValueError("source must be 'lanes' or 'jobs'")
        # A beat must land well inside the lapse, or the reaper takes a live worker's jobs
        # between two beats: by default once a second, or thrice per lapse if that is shorter.
        if heartbeat_ms is None:
            heartbeat_ms = max(10, min(1_000, lapse_ms // 3))
        if heartbeat_ms >= lapse_ms:
            raise ValueError("heartbeat_ms must be shorter than lapse_ms")
        if park_max_ms < 10 or reap_interval_ms < 1:
            raise ValueError("park_max_ms must be >= 10, reap_interval_ms >= 1")
        # Idle beats are rarer, never more frequent than busy ones; the idle deadline
        # leaves room for two lost beats, and is never shorter than the busy lapse.
        idle_heartbeat_ms = max(heartbeat_ms, idle_heartbeat_ms)
        return cls(
            lease_ms=lease_ms,
            concurrency=concurrency,
            worker_id=worker_id or mint_worker_id(),
            source=source,
            batch=batch,
            prefetch=prefetch,
            heartbeat_ms=heartbeat_ms,
            lapse_ms=lapse_ms,
            reap_interval_ms=reap_interval_ms,
            park_max_ms=park_max_ms,
            idle_heartbeat_ms=idle_heartbeat_ms,
            idle_lapse_ms=max(lapse_ms, 3 * idle_heartbeat_ms),
            # The reaper lock outlives the longest pause between two turns of its holder
            # by one reap interval: a holder that dies is replaced within lapse + reap
            # interval.
            reap_lock_ms=max(reap_interval_ms, lapse_ms) + reap_interval_ms,
            # The longest silence of the server a live queue leaves (beats and reap
            # calls): a longer one is an outage and every holder gets a lapse
            # (stalled.pulse_gap_ms).
            pulse_gap_ms=pulse_gap_ms(lapse_ms, heartbeat_ms, reap_interval_ms),
            grace_ms=lease_ms if grace_ms is None else grace_ms,
            reaper=reaper,
            timeout_ms=timeout_ms,
            probe_max_ms=probe_max_ms,
            # How long a suspect keeps the consumer from claiming more, from its start.
            suspect_ms=lease_ms if timeout_ms is None else min(lease_ms, timeout_ms),
        )
