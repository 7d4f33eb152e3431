"""The figures: their names, units and which way is better, computed from what the drivers
report, then medians over rounds and ratios to the fastest peer. Pure functions, no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The share of a drain left out at each end of the steady rate: the first 10 % holds the
# worker's start (first claims, connection warm-up, caches), the last 10 % its tail, where
# fewer jobs are left than it has slots. Steady = the middle 80 % of jobs over the time
# between the 10th and the 90th percentile completions, on the worker's own clock.
STEADY_FROM, STEADY_TO = 0.10, 0.90


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool


FIGURES = (
    Figure("drain_steady_per_s", "drain steady", "jobs/s", True),
    Figure("drain_total_per_s", "drain whole", "jobs/s", True),
    Figure("enqueue_single_per_s", "enqueue single", "jobs/s", True),
    Figure("enqueue_10_per_s", "enqueue 10 concurrent", "jobs/s", True),
    Figure("e2e_p50_ms", "e2e p50 @rate", "ms", False),
    Figure("e2e_p99_ms", "e2e p99 @rate", "ms", False),
    Figure("cmds_enqueue_per_job", "Valkey cmds per job, enqueue", "cmds", False),
    Figure("cmds_drain_per_job", "Valkey cmds per job, drain", "cmds", False),
    Figure("worker_cpu_us_per_job", "worker CPU per job", "µs", False),
    Figure("valkey_cpu_us_per_job", "Valkey CPU per job drained", "µs", False),
)
MULTI_FIGURES = (
    Figure("drain_steady_per_s", "drain steady", "jobs/s", True),
    Figure("drain_total_per_s", "drain whole", "jobs/s", True),
    Figure("cmds_drain_per_job", "Valkey cmds per job, drain", "cmds", False),
    Figure("share_of_ceiling", "steady drain ÷ EVALSHA ceiling", "", True),
)
BY_KEY = {f.key: f for f in FIGURES + MULTI_FIGURES}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..1)."""
    if not sorted_values:
        raise ValueError("no values")
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values) - 1e-9) - 1))
    return float(sorted_values[i])


def drain_rates(times_us: Iterable[int], go_us: int) -> tuple[float, float]:
    """(steady jobs/s, whole jobs/s) from every job's completion time (µs, any order) and
    the moment the worker(s) were told to go."""
    t = sorted(times_us)
    n = len(t)
    if n < 2:
        raise ValueError("too few jobs for a rate")
    lo, hi = int(STEADY_FROM * n), max(int(STEADY_TO * n) - 1, int(STEADY_FROM * n) + 1)
    span = max(t[hi] - t[lo], 1)
    return (hi - lo) * 1e6 / span, n * 1e6 / max(t[-1] - go_us, 1)


def latency_ms(latency_us: Sequence[int]) -> dict[str, float]:
    s = sorted(latency_us)
    return {
        "p50": percentile(s, 0.50) / 1000,
        "p90": percentile(s, 0.90) / 1000,
        "p99": percentile(s, 0.99) / 1000,
        "max": s[-1] / 1000,
    }


def medians(rounds: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per figure, the median over the rounds that have it."""
    keys = {k for r in rounds for k in r}
    out: dict[str, float | None] = {}
    for k in sorted(keys):
        values = [float(v) for r in rounds if (v := r.get(k)) is not None]
        out[k] = statistics.median(values) if values else None
    return out


def fastest_peer(median_by_peer: Mapping[str, Mapping[str, float | None]]) -> str | None:
    """The non-EchoMQ peer with the highest steady drain."""
    theirs = {
        k: v["drain_steady_per_s"]
        for k, v in median_by_peer.items()
        if not k.startswith("echomq") and v.get("drain_steady_per_s") is not None
    }
    return max(theirs, key=lambda k: theirs[k] or 0.0) if theirs else None


def ratios(
    mine: Mapping[str, float | None], reference: Mapping[str, float | None]
) -> dict[str, float | None]:
    """Each figure divided by the reference peer's (> 1: more of it, whichever way is better)."""
    out: dict[str, float | None] = {}
    for f in FIGURES:
        a, b = mine.get(f.key), reference.get(f.key)
        out[f.key] = None if a is None or not b else a / b
    return out
