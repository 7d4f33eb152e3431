"""The door's adaptive bound: it shrinks when a guess's time inside it grows."""

from __future__ import annotations

# The adaptive bound (:class:`Gradient`): a guess's time at the door may grow to this many
# times its unloaded time before the bound shrinks; never below MIN_LIMIT.
TOLERANCE = 1.2
MIN_LIMIT = 0.25  # below one slot: a duty cycle (heavy requests get a slot this share of the time)
BASELINE_S = 30  # the unloaded time: the quietest second's mean of the last 30


class Gradient:
    """The door's bound, adapted to how long guesses take inside it (after Netflix's gradient
    limiter): when the recent time of a guess (an EWMA of the last few) grows past
    :data:`TOLERANCE` times its unloaded time (the quietest second of the last
    :data:`BASELINE_S`), the bound shrinks in proportion, down to :data:`MIN_LIMIT`; while it
    stays within, the bound grows again (~3 % an update), back up to the configured one. A bound
    that is not being used (fewer than half its slots busy) is left as it is. Below one slot the
    bound is a duty cycle: after a heavy sender's request a slot stays idle long enough that
    heavy senders have it only that share of the time (at most :data:`MAX_IDLE_S` at once) — a
    throughput bound, where a bound of one slot would still let heavy senders in as fast as one
    at a time finishes.

    The process's own work is what grows a guess's time: a busy event loop, a CPU the
    machine's other processes want, a slower Valkey. A smaller bound then queues more at
    the door, where light senders go first and the heaviest are shed, instead of in the
    event loop, first come first served."""

    def __init__(self, max_limit: int, min_limit: float = MIN_LIMIT) -> None:
        self.max_limit = max_limit
        self.min_limit = min(min_limit, float(max_limit))
        self.value = float(max_limit)
        self.recent: float | None = None
        self.baseline: float | None = None
        self._seconds: list[tuple[int, float, int]] = []  # (second, sum, count)
        self._n = 0

    def sample(self, seconds: float, now: float, busy: int) -> float:
        """One guess's time in its slot; the bound to apply from now (below 1: the share
        of the time one slot may be busy with heavy senders)."""
        self.recent = seconds if self.recent is None else self.recent * 0.8 + seconds * 0.2
        second = int(now)
        buckets = self._seconds
        if buckets and buckets[-1][0] == second:
            _, total, count = buckets[-1]
            buckets[-1] = (second, total + seconds, count + 1)
        else:
            buckets.append((second, seconds, 1))
            while buckets[0][0] <= second - BASELINE_S:
                buckets.pop(0)
            means = [total / count for _, total, count in buckets[:-1] if count >= 3]
            self.baseline = min(means) if means else None
        self._n += 1
        if self._n % 4 or self.baseline is None or busy < self.value / 2:
            return self.value
        gradient = max(0.5, min(1.0, TOLERANCE * self.baseline / self.recent))
        # room to grow: an eighth of a slot, and while times are within tolerance 15 % of
        # the bound (a slot at most), so the bound grows ~3 % an update: back from one slot
        # to 16 in ~100 updates, without a burst of heavy requests that a jump would let in
        grow = min(1.0, 0.15 * self.value) if gradient >= 1 else 0.0
        target = self.value * gradient + 0.125 + grow
        self.value = max(self.min_limit, min(self.max_limit, 0.8 * self.value + 0.2 * target))
        return self.value
