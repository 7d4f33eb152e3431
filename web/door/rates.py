"""A sender's recent request rate, and the bounded tables of recent senders behind it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# The time constant of the rate estimates: a sender's rate is its requests over ~2 s.
RATE_TAU_S = 2.0


def forget(entries: dict[K, V], stale: Callable[[V], bool], keep: int) -> None:
    """Bound a table of recent senders: drop its stale entries, and if more than ``keep``
    are left (a flood of new keys), the oldest of them (dicts keep insertion order)."""
    for key in [k for k, v in entries.items() if stale(v)]:
        del entries[key]
    excess = len(entries) - keep
    if excess > 0:
        for key in list(entries)[:excess]:
            del entries[key]


def count_down(counts: dict[K, int], key: K) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


class FlowRates:
    """Recent request rate per key: a count decaying with time constant ``tau_s``, read as
    requests per second. Bounded: past ``max_keys`` the quiet keys are forgotten, and if
    that is not enough, the oldest."""

    def __init__(self, tau_s: float = RATE_TAU_S, max_keys: int = 50_000) -> None:
        self.tau_s = tau_s
        self.max_keys = max_keys
        self._counts: dict[Any, list[float]] = {}

    def __len__(self) -> int:
        return len(self._counts)

    def hit(self, key: Any, now: float) -> float:
        """Count one request of ``key`` at ``now``; its rate, this one included."""
        entry = self._counts.get(key)
        if entry is None:
            if len(self._counts) >= self.max_keys:
                self._prune(now)
            self._counts[key] = [1.0, now]
            return 1.0 / self.tau_s
        value = entry[0] * math.exp((entry[1] - now) / self.tau_s) + 1.0
        entry[0], entry[1] = value, now
        return value / self.tau_s

    def __contains__(self, key: Any) -> bool:
        return key in self._counts

    def rate(self, key: Any, now: float) -> float:
        entry = self._counts.get(key)
        if entry is None:
            return 0.0
        return entry[0] * math.exp((entry[1] - now) / self.tau_s) / self.tau_s

    def _prune(self, now: float) -> None:
        tau = self.tau_s

        def quiet(entry: list[float]) -> bool:
            return entry[0] * math.exp((entry[1] - now) / tau) < 0.5

        forget(self._counts, quiet, self.max_keys // 2)
