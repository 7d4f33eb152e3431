"""Per-key allowances of work one process does alone: token buckets kept in memory.

A resume's replay reads the events stream on this process's behalf; nothing about it is
shared with other processes, so its budget needs no round trip to Valkey (unlike the
guess rate, which every process must agree on). Work is spent after it is done and may
leave a key in debt: a key in debt gets nothing until the refill has paid it back, which
is what makes reconnecting in a loop cost the client, not the other players.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Allowances:
    def __init__(
        self,
        per_minute: float,
        burst: float,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.max_keys = max_keys
        self.clock = clock
        self._keys: dict[str, tuple[float, float]] = {}  # key -> (balance, as of)

    @property
    def enabled(self) -> bool:
        return self.rate > 0 and self.burst > 0

    def available(self, key: str) -> float:
        """What ``key`` may spend now (negative while in debt)."""
        if not self.enabled:
            return float("inf")
        kept = self._keys.get(key)
        if kept is None:
            return self.burst
        balance, at = kept
        return min(self.burst, balance + (self.clock() - at) * self.rate)

    def spend(self, key: str, amount: float) -> None:
        if not self.enabled or amount <= 0:
            return
        balance = self.available(key) - amount
        if len(self._keys) >= self.max_keys and key not in self._keys:
            self._forget_full()
        self._keys[key] = (balance, self.clock())

    def _forget_full(self) -> None:
        """Drop the keys whose buckets have refilled: they say nothing a new key would not."""
        now = self.clock()
        for key, (balance, at) in list(self._keys.items()):
            if balance + (now - at) * self.rate >= self.burst:
                del self._keys[key]
        if len(self._keys) >= self.max_keys:  # all in debt: keep the newest half
            for key in list(self._keys)[: len(self._keys) // 2]:
                del self._keys[key]
