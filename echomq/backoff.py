"""One backoff for every "try again" loop: exponential, capped, with full jitter so that
clients that lost the same server do not come back in step."""

from __future__ import annotations

import asyncio
import random


class Backoff:
    """``first * 2**n`` seconds after the n-th failure in a row (n from 1), at most
    ``cap``; with ``jitter`` a uniform draw in [0, that]. :meth:`reset` after a success."""

    def __init__(self, first: float = 0.05, cap: float = 2.0, *, jitter: bool = True) -> None:
        if not 0 < first <= cap:
            raise ValueError("backoff needs 0 < first <= cap")
        self.first, self.cap, self.jitter = first, cap, jitter
        self.failures = 0

    def next_delay(self) -> float:
        """Count one more failure and return how long to wait before the next try."""
        self.failures += 1
        ceiling = min(self.cap, self.first * 2 ** (self.failures - 1))
        return random.uniform(0, ceiling) if self.jitter else ceiling

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())

    def reset(self) -> None:
        self.failures = 0
