"""Admission at the door: token buckets kept in Valkey, on its clock, shared by every web
process (so a client gains nothing by spreading requests over them), the in-process mirror
that refuses what Valkey has already refused, and what "one client address" means.

* :class:`TokenBuckets`: player creation per client address (one round trip each).
* :class:`BucketMirror`: the per-player guess rate lives in the enqueue script itself (one
  round trip per guess); the mirror keeps, per player, an upper bound on that bucket's
  tokens from what the script answered this process, so a guess Valkey would certainly
  refuse is refused here, without the round trip. Valkey stays the authority: the bound only
  ever comes from its answers and only ever errs towards asking it.
* :func:`address_key`: the client address limits are kept per — an IPv4 address, or an
  IPv6 address's /64 (one subscriber's prefix: a host picks any address in it at will).
* :class:`Limits`: the numbers every check above (and the enqueue script) takes, read once
  from the configuration.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import echomq
import echomq.scripts
from codemojex import keys
from codemojex.errors import RateLimited, retry_after_s

if TYPE_CHECKING:
    from codemojex.config import Config

__all__ = ["BucketMirror", "Limits", "TokenBuckets", "address_key"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What the game admits: per player, a guess rate (a token bucket in the enqueue
    script) and a cap on guesses accepted and not yet scored; per client address, a rate of
    new players. A rate of 0 is off, and then its burst is 0 too: the script reads a burst
    only beside a rate."""

    guess_rate: float
    guess_burst: int
    lane_cap: int  # 0: no cap
    player_rate: float
    player_burst: int

    @classmethod
    def of(cls, config: Config) -> Limits:
        on = config.guess_rate > 0 and config.guess_burst > 0
        return cls(
            guess_rate=config.guess_rate if on else 0,
            guess_burst=config.guess_burst if on else 0,
            lane_cap=max(0, config.lane_cap),
            player_rate=config.player_rate,
            player_burst=config.player_burst,
        )


IPV6_PREFIX = 64
_ADDRESS_CACHE_SIZE = 4096
_address_cache: dict[str, str] = {}


def address_key(host: str | None) -> str:
    """The subject a client address is limited as: an IPv4 address as is, an IPv6 address
    by its /64 (``2001:db8:1:2::/64``), an IPv4-mapped IPv6 address as its IPv4 address;
    anything that is not an IP address (a unix socket's peer, a test client) as given."""
    if not host:
        return ""
    if ":" not in host:
        return host  # IPv4 (or a name): the common case costs no parse
    key = _address_cache.get(host)
    if key is None:
        try:
            addr = ipaddress.IPv6Address(host.partition("%")[0])  # a zone id names no host
        except ValueError:
            key = host
        else:
            mapped = addr.ipv4_mapped
            if mapped is not None:
                key = str(mapped)
            else:
                key = str(ipaddress.IPv6Network((addr, IPV6_PREFIX), strict=False))
        if len(_address_cache) >= _ADDRESS_CACHE_SIZE:
            _address_cache.clear()
        _address_cache[host] = key
    return key


_TAKE_TOKEN = echomq.scripts.Script.from_file(Path(__file__).with_name("lua") / "take_token.lua")


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
        self._conn = conn

    def key(self, subject: str) -> str:
        return keys.bucket_key(self.name, subject)

    async def take(self, subject: str) -> None:
        if not self.rate_per_s:
            return
        taken, retry_ms = await _TAKE_TOKEN.run(
            self._conn, [self.key(subject)], [self.rate_per_s, self.burst]
        )
        if not int(taken):
            raise RateLimited(retry_after_s(int(retry_ms)), self.detail)


class BucketMirror:
    """An upper bound, per subject, on the tokens of a token bucket kept in Valkey (the
    enqueue script's per-player bucket: ``rate_per_s`` refill, ``burst`` capacity).

    Only Valkey's answers to this process move the bound, and each move keeps it an upper
    bound whatever other processes do meanwhile (they can only take tokens):

    * a refusal (``retry_ms``: the script's wait for the next token) of a call sent at
      ``t``: the bucket held fewer than ``1 - (retry_ms - 1) * rate / 1000`` tokens when
      the script ran, at or after ``t`` (``retry_ms`` is rounded up);
    * an acceptance of a call sent at ``t``: one token fewer than the bound stood at ``t``
      (an answer read after ``t`` may already count this very take, so it is not used).

    Between answers the bound refills at the bucket's rate, up to ``burst``: then it says
    nothing and is forgotten. :meth:`wait_s` is positive only while the bound is under one
    token, when the script would certainly refuse: the caller may refuse without asking.
    All times are this process's monotonic clock, which runs at Valkey's clock's rate.
    """

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        max_subjects: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = float(rate_per_s) if rate_per_s > 0 and burst >= 1 else 0.0
        self.burst = burst
        self.max_subjects = max_subjects
        self.clock = clock
        # subject -> c, where the bound at monotonic time t is min(burst, c + t * rate)
        self._c: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._c)

    def mark(self, subject: str) -> tuple[float, float]:
        """What to hand back with the answer of a call about to be sent: its send time and
        the bound's intercept then (a full bucket's when there was no bound)."""
        now = self.clock()
        if not self.rate:
            return now, math.inf
        full = self.burst - now * self.rate
        c = self._c.get(subject)
        return now, full if c is None or c > full else c

    def wait_s(self, subject: str) -> float:
        """Seconds until the bound reaches one token; 0 when Valkey must be asked."""
        c = self._c.get(subject)
        if c is None or not self.rate:
            return 0.0
        tokens = c + self.clock() * self.rate
        if tokens >= self.burst:
            del self._c[subject]  # full again: nothing left to know
            return 0.0
        if tokens >= 1:
            return 0.0
        return (1 - tokens) / self.rate

    def refused(self, subject: str, retry_ms: int, mark: tuple[float, float]) -> None:
        """The script refused the call of ``mark``, a token being due in ``retry_ms``."""
        if not self.rate:
            return
        # retry_ms = ceil((1 - tokens) * 1000 / rate), so tokens < 1 - (retry_ms - 1) * rate
        # / 1000; one more millisecond of slack covers the two clocks' rates and rounding.
        below = 1 - max(0, retry_ms - 2) * self.rate / 1000
        self._tighten(subject, below - mark[0] * self.rate)

    def took(self, subject: str, mark: tuple[float, float]) -> None:
        """The script took a token for the call of ``mark``."""
        if self.rate:
            self._tighten(subject, mark[1] - 1)

    def _tighten(self, subject: str, c: float) -> None:
        old = self._c.get(subject)
        if old is not None and old <= c:
            return
        if old is None and len(self._c) >= self.max_subjects:
            self._prune()
        self._c[subject] = c

    def _prune(self) -> None:
        full = self.burst - self.clock() * self.rate
        for subject in [s for s, c in self._c.items() if c >= full]:
            del self._c[subject]
        while len(self._c) >= self.max_subjects:  # still full: the oldest bounds go first
            del self._c[next(iter(self._c))]
