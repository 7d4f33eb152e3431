"""Admission at the door: token buckets kept in Valkey, on its clock, shared by every web
process (so a client gains nothing by spreading requests over them).

Used for player creation per client address; the per-player guess rate lives in the
enqueue script itself (one round trip per guess), not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codemojex.errors import RateLimited, retry_after_s

__all__ = ["TokenBuckets"]

_TAKE_TOKEN = (Path(__file__).with_name("lua") / "take_token.lua").read_text()


class TokenBuckets:
    """``await buckets.take(subject)``: one token of ``subject``'s bucket, or
    :class:`RateLimited` with the whole seconds until one is back (at least 1)."""

    def __init__(self, conn: Any, name: str, rate_per_s: float, burst: int, detail: str) -> None:
        if rate_per_s < 0 or burst < 1:
            raise ValueError("rate must be >= 0 (0 = off) and burst >= 1")
        self.name = name
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.detail = detail
        self._take = conn.register_script(_TAKE_TOKEN)

    def key(self, subject: str) -> str:
        return f"cmx:bucket:{self.name}:{subject}"

    async def take(self, subject: str) -> None:
        if not self.rate_per_s:
            return
        taken, retry_ms = await self._take(
            keys=[self.key(subject)], args=[self.rate_per_s, self.burst]
        )
        if not int(taken):
            raise RateLimited(retry_after_s(int(retry_ms)), self.detail)
