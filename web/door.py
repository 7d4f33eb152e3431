"""The door of a web process: how many API requests it works on at once, who waits, who is
shed (docs/contract.md §4, Overload).

Without a door, every request a client sent was worked on at once: past ~100 in flight
redis-py's pool refused them all alike (``MaxConnectionsError``, ``503 unavailable`` to
everyone), and below that the event loop served a masher's hundreds of requests and an
honest player's one first come, first served. :class:`Door` (ASGI middleware over
``/api/`` paths; pages, static files, health and metrics pass only its per-address bound, and
a socket's handshake takes the same, :meth:`Gate.address_slot`) does what nginx's
``limit_conn``, fq_codel and an adaptive concurrency limiter (Netflix's gradient, Envoy's
adaptive concurrency) do together:

* **The body first.** A request's body (at most ``MAX_BODY_BYTES``) is read before the
  request counts against anything, within :data:`BODY_TIMEOUT_S`; one that does not arrive
  in time is ``408 request_timeout`` and its connection is closed. A client that declares a
  body and never sends it holds its own connection, not a slot.
* **No simple cross-site writes.** A state-changing request whose ``Origin`` is foreign and
  whose body is not declared ``application/json`` is ``403 forbidden`` before anything
  runs: a hostile page's form or ``text/plain`` fetch (a CORS "simple request", sent
  without a preflight) cannot spend the visitor's address bucket.

* **A bound.** At most ``limit`` requests are worked on at once (``--door-in-flight``);
  the Valkey pool is sized above it (``codemojex.game.pool_size``) and waits rather than
  fails, so the pool is never the cliff. The bound adapts (:class:`Gradient`): when a
  guess's time inside grows past :data:`TOLERANCE` times its unloaded time, it shrinks, to
  a duty cycle below one slot if need be, and grows back once times are normal again.
* **Players first, addresses second.** Each request is weighed at arrival. An
  authenticated player weighs its own recent request rate (an exponentially decaying count
  per bearer token, counted as each request arrives: waiting at the door adds nothing to
  it); a token the door has not seen lately starts at the light threshold, behind players
  known to send at an honest pace. A player within the light threshold with at most
  :data:`PLAYER_IN_FLIGHT` requests here is its own sender: neither its address's bound nor
  its address's share refuses it, whatever else its address sends (a school, an office, a
  carrier's CGNAT is one address). A request without a token this process has
  authenticated (none, or one it does not know) weighs its address's rate of such
  requests, whole, plus its address's rate of all requests over :data:`ADDRESS_SHARE`
  (:func:`codemojex.admission.address_key`: an IPv6 /64 is one address): an address
  sending many of them is heavy by its own rate, and only authenticated players' rates set
  the light threshold (:meth:`Gate.field`), so a flood of made-up tokens cannot make
  honest players heavy.
* **Light first.** A request of weight at most :data:`LIGHT_RATE` (an honest pace) takes a
  free slot up to twice the configured bound whatever the adaptive one; any other waits, and a
  free slot goes to the lightest waiting (fq_codel's new flows first), so a player at an
  honest pace is served next however many requests a masher has waiting.
* **Heaviest shed.** A request that has waited ``wait_s`` (``--door-wait-ms``, the
  queue-delay target, as in CoDel) is shed, a light one only after :data:`LIGHT_PATIENCE`
  times that; under sustained overload those are the
  heaviest senders', which are never the lightest waiting. When :data:`MAX_WAITING` wait,
  the heaviest is shed at once to make room (the newcomer itself if it is the heaviest).
  Shed: ``503 overloaded`` with ``Retry-After``.
* **An address's share under overload.** While the door is overloaded (the adaptive bound
  below the configured one, or requests waiting), an address's guesses from senders past
  the light threshold by their own rate (over HTTP or the socket) are admitted at most at
  :data:`HEAVY_FLOOR` a second plus :data:`HEAVY_SHARE` of its light ones; past that they
  are shed at once. A player within the threshold is never charged to it. Reads are not
  charged: an accepted guess is what costs the honest players even when each heavy request
  is admitted after theirs: every accepted guess is scored by the workers on the same cores.
* **Per address.** One client address has at most ``address_limit`` requests at the door,
  working or waiting (``--address-in-flight``), whatever their path, socket handshakes
  included, of which senders past the light threshold hold at most
  :data:`FAST_ADDRESS_SHARE`; more are refused ``503 overloaded`` (a handshake: closed 1013
  after accept). A player's own requests (above) are outside it.
* **Refusals that cost little.** A guess from a player the bucket mirror already refuses
  (:class:`codemojex.admission.BucketMirror`) goes around the queue: it is answered
  ``429`` without a Valkey round trip, so it needs no slot. No ``503 overloaded`` leaves
  sooner than :data:`MIN_REFUSAL_S` (``Retry-After``) after its request arrived: a client
  that retries without waiting gains nothing by it and holds its connection that long per
  try instead of looping at the server's speed; a held refusal is a timer, not work. A
  sender (its token, else its address) that comes back before the ``Retry-After`` of its
  last refusal has passed has its next refusal held twice as long, up to
  :data:`MAX_REFUSAL_S`: the closed loops of a client that never waits then cost the
  process a fraction of the requests they would make (:meth:`Gate.refusal_hold`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemojex.admission import address_key
from web.errors import MAX_BODY_BYTES, ForeignOrigin, RequestTimeout, error_response

log = logging.getLogger("codemojex.web")

__all__ = [
    "BODY_TIMEOUT_S",
    "LIGHT_RATE",
    "BodyDeadlines",
    "Door",
    "FlowRates",
    "Gate",
    "GateCollector",
    "Shed",
    "hold_refusal",
    "origin_allowed",
    "through",
]

# How long a request's body may take to arrive before it is 408 request_timeout: the
# contract's 16 KiB take a fraction of this on the slowest honest link, and until it is
# here the request holds nothing at the door.
BODY_TIMEOUT_S = 2.0
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# A request without a token this process knows weighs its address's rate of such requests,
# plus its address's rate of all requests over this many. A player's request weighs its own
# rate alone: one address is often many people (a school, an office, a carrier's CGNAT).
ADDRESS_SHARE = 1024.0
# A player within the light threshold has this many of its requests at the door as its own,
# outside its address's bound: a guess and a read, or a guess and its retry. Past that, its
# requests count against its address like any other.
PLAYER_IN_FLIGHT = 2
# Senders past the light threshold (players by their own rate, tokenless requests by their
# address's) hold at most this share of their address's bound together: the rest stays for
# that address's sign-ups, pages, socket handshakes and tokens this process has yet to see,
# so mashers behind an address cannot lock its new players out.
FAST_ADDRESS_SHARE = 0.75
# The time constant of the rate estimates: a sender's rate is its requests over ~2 s.
RATE_TAU_S = 2.0
MAX_WAITING = 1024
MIN_REFUSAL_S = 1.0
# The longest a refusal is held (a sender that keeps coming back before its Retry-After):
# under the 5 s many HTTP clients time out at (httpx's default), since a client that times
# out opens a new connection, which costs the process more than a held answer.
MAX_REFUSAL_S = 4.0
MAX_REFUSED_SENDERS = 50_000
RETRY_AFTER_S = 1
MAX_TOKEN_BYTES = 300  # a longer Authorization header is no token (401): weighed by address
# The adaptive bound (:class:`Gradient`): a guess's time at the door may grow to this many
# times its unloaded time before the bound shrinks; never below MIN_LIMIT.
TOLERANCE = 1.2
MIN_LIMIT = 0.25  # below one slot: a duty cycle (heavy requests get a slot this share of the time)
MAX_IDLE_S = 0.5  # the longest a slot idles after a heavy request under a duty cycle
# A request of a sender this light (requests a second, as weighed) takes a free slot up to
# twice the configured bound even when the adaptive one is lower: honest pace is never queued
# behind the bound that holds the heavy senders back. Between the two loads the door must
# tell apart (bench_game, bench_door): 200 players at 5 guesses/s each from one address
# are honest (at 2, with 64 for the address share, they were all heavy and 1,000/s was
# shed down to 538 accepted/s at 44 % of a core), a closed-loop masher with 8 in flight
# is not (its rate alone passes 10 within its first answers). The game's own per-player
# rate is 10 guesses a second. A token not seen lately weighs this much.
LIGHT_RATE = 10.0
# The light threshold follows the field (Gate.field): this many times the rate of the
# sender at FIELD_QUANTILE of the field (slowest first), recomputed every FIELD_WINDOW_S,
# never below LIGHT_FLOOR (an honest player's burst of a guess or two in a second) nor above
# LIGHT_RATE. A low quantile, not the median: with the median, 200 mashers beside 100
# honest players set the pace themselves (the threshold rose to 10 and most masher
# requests were light; bench_door's 200-from-20-addresses row let in 2,976-5,090 masher
# guesses with the median, 1,493-2,312 with the quantile, in runs one after the other);
# they must now be four in five of the field's tokens to move it.
FIELD_MULTIPLE = 3.0
FIELD_QUANTILE = 0.2
FIELD_WINDOW_S = 0.5
FIELD_SPAN_S = 5.0
FIELD_MAX_SENDERS = 4096  # the field's sample: a flood of new tokens is not all counted
LIGHT_FLOOR = 2.0
# While the door is overloaded (its adaptive bound below the configured one, or requests waiting),
# an address's heavy guesses (heavy by its senders' rates, see through) are admitted at most at
# HEAVY_FLOOR a second plus HEAVY_SHARE of its light ones: what the mashers of one address are let
# in is two honest paces, not ten (10 mashers at the game's rate each were 100 accepted guesses a
# second, each scored by the workers on the same two cores as the honest players' own), while an
# address of many honest players whose bursts tip a few of them heavy keeps a share in proportion to
# what it sends lightly (bench_game's 1,000/s from 200 players). Two paces, not one: a single player
# spending its bucket's burst still gets past its refill rate, so Valkey refuses it and the bucket
# mirror answers its next guesses 429 without the door.
HEAVY_FLOOR = 2 * LIGHT_RATE
HEAVY_SHARE = 0.25
# A light request waits this many times --door-wait-ms before it is shed: when light ones
# wait, the light slots are held by other light requests, which a CPU-starved process
# finishes slowly (bench_door's 200 mashers: 30 honest requests at ~1 s each held the 32
# light slots, and 24 of 365 honest guesses were shed after 0.5 s). Late beats refused for
# an honest pace; the heavy are shed at the target as before.
LIGHT_PATIENCE = 4
OVERLOAD_FRESH_S = 2.0  # a shrunk bound counts as overload this long after the last guess
BASELINE_S = 30  # the unloaded time: the quietest second's mean of the last 30

Peek = Callable[[Scope, str], bool]
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def _forget(entries: dict[K, V], stale: Callable[[V], bool], keep: int) -> None:
    """Bound a table of recent senders: drop its stale entries, and if more than ``keep``
    are left (a flood of new keys), the oldest of them (dicts keep insertion order)."""
    for key in [k for k, v in entries.items() if stale(v)]:
        del entries[key]
    excess = len(entries) - keep
    if excess > 0:
        for key in list(entries)[:excess]:
            del entries[key]


def _count_down(counts: dict[K, int], key: K) -> None:
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

        _forget(self._counts, quiet, self.max_keys // 2)


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


class _Waiter:
    __slots__ = ("future", "live", "weight")

    def __init__(self, weight: float, future: asyncio.Future[bool]) -> None:
        self.weight = weight
        self.future = future
        self.live = True


def _overloaded(detail: str) -> tuple[Message, Message]:
    body = orjson.dumps({"error": "overloaded", "detail": detail})
    start: Message = {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(RETRY_AFTER_S).encode()),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            if len(value) > MAX_TOKEN_BYTES:
                return None
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


class Gate:
    """The door's state, shared by its middleware and its metrics: the bound, the queue,
    the rate estimates, the per-address counts. ``limit=0`` lets every request in at once
    (no queue); ``address_limit=0`` sets no per-address bound."""

    def __init__(
        self,
        *,
        limit: int,
        wait_ms: int,
        address_limit: int,
        adaptive: bool = True,
        light_rate: float = LIGHT_RATE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 0 or wait_ms < 0 or address_limit < 0:
            raise ValueError("door limits must be >= 0 (0 = off)")
        self.limit = limit  # the bound now: the gradient's, up to the configured one
        self.duty = 1.0  # below 1: the share of the time a slot may serve heavy senders
        self.max_limit = limit
        self.gradient = Gradient(limit) if limit and adaptive else None
        self.wait_s = wait_ms / 1000
        self.light_rate = light_rate  # requests a second that count as an honest pace
        # The light threshold now: FIELD_MULTIPLE times the field's pace, between
        # LIGHT_FLOOR and light_rate (:meth:`field`).
        self.light_floor = min(LIGHT_FLOOR, light_rate)
        self.light_now = light_rate
        self._field: dict[str, tuple[float, float]] = {}  # token -> its rate, as of
        self._field_at = clock()
        # Light requests may hold twice the configured bound: an honest crowd's bursts
        # (1,000 guesses/s from 200 players) are not shed for want of a slot, while heavy
        # senders stay under the adaptive bound, at most the configured one.
        self.light_limit = 2 * limit
        self.address_limit = address_limit
        self.clock = clock
        self.players = FlowRates()
        self.addresses = FlowRates()
        # per address, its requests without a token this process has authenticated
        self.anonymous = FlowRates()
        # admissions per address, light and heavy apart: the address share under overload
        self.light_in = FlowRates()
        self.heavy_in = FlowRates()
        self.timed_at = -math.inf  # when a guess last fed the gradient
        self.working = 0
        self.resting = 0  # slots resting after a heavy request (the duty cycle)
        self.waiting = 0
        self._lightest: list[tuple[float, int, _Waiter]] = []
        self._heaviest: list[tuple[float, int, _Waiter]] = []
        self._seq = 0
        self.at_door: dict[str, int] = {}  # address -> requests working or waiting
        self.fast_at_door: dict[str, int] = {}  # address -> those of players past light
        self.tokens_at_door: dict[str, int] = {}  # bearer token -> its requests here
        # sender -> (when its last refusal was answered, times in a row it came back early)
        self.refused: dict[str, tuple[float, int]] = {}
        # admitted, queued, bypassed, shed_wait, shed_full, shed_address
        self.counts: Counter[str] = Counter()

    def take_address(self, address: str, *, fast: bool = False) -> bool:
        """One more request of ``address`` at the door, if its bound allows (then hand it
        back with :meth:`release_address`, with the same ``fast``). ``fast``: a player's
        past the light threshold, which together hold at most :data:`FAST_ADDRESS_SHARE`
        of the bound."""
        held = self.at_door.get(address, 0)
        limit = self.address_limit
        if limit and held >= limit:
            return False
        if fast:
            busy = self.fast_at_door.get(address, 0)
            if limit and busy >= max(1, int(limit * FAST_ADDRESS_SHARE)):
                return False
            self.fast_at_door[address] = busy + 1
        self.at_door[address] = held + 1
        return True

    def release_address(self, address: str, *, fast: bool = False) -> None:
        _count_down(self.at_door, address)
        if fast:
            _count_down(self.fast_at_door, address)

    @contextlib.contextmanager
    def address_slot(self, address: str) -> Iterator[bool]:
        """:meth:`take_address` for a block: yields whether the address had room (when
        False, nothing was taken and the block should refuse), counting the refusal."""
        if not self.take_address(address):
            self.counts["shed_address"] += 1
            yield False
            return
        try:
            yield True
        finally:
            self.release_address(address)

    def timed(self, seconds: float) -> None:
        """A guess held a slot for ``seconds``: the gradient may move the bound."""
        if self.gradient is not None:
            self.timed_at = now = self.clock()
            value = self.gradient.sample(seconds, now, self.working)
            self.limit = max(1, int(value))
            self.duty = min(1.0, value)

    def field(self, token: str, rate: float, now: float) -> None:
        """One request of ``token`` at ``rate``: a sender is weighed against the field it
        arrives with (fq_codel's sparse flows, by rate). Each :data:`FIELD_WINDOW_S` the
        light threshold becomes :data:`FIELD_MULTIPLE` times the rate at
        :data:`FIELD_QUANTILE` (slowest first) of the senders seen in the last
        :data:`FIELD_SPAN_S` (long enough to see most players at an honest pace), one vote
        each however much they sent, kept between
        :data:`LIGHT_FLOOR` and ``light_rate``: among 100 players at 0.3 guesses/s a
        sender at 5/s is heavy, among 200 at 5/s it is one of the crowd."""
        seen = self._field
        if token in seen or len(seen) < FIELD_MAX_SENDERS:
            seen[token] = (rate, now)
        if now - self._field_at < FIELD_WINDOW_S:
            return
        self._field_at = now
        since = now - FIELD_SPAN_S
        for key in [k for k, (_, at) in seen.items() if at < since]:
            del seen[key]
        if seen:
            rates = sorted(r for r, _ in seen.values())
            pace = rates[int(len(rates) * FIELD_QUANTILE)]
            self.light_now = max(self.light_floor, min(self.light_rate, FIELD_MULTIPLE * pace))

    @property
    def overloaded(self) -> bool:
        """Requests wait for the bound, or the adaptive bound is below the configured one
        as of a guess timed lately (the bound moves only with guesses: with none for a
        while it says nothing of now)."""
        if self.waiting > 0:
            return True
        return self.limit < self.max_limit and self.clock() - self.timed_at < OVERLOAD_FRESH_S

    def over_share(self, address: str, now: float) -> bool:
        """Whether a heavy guess of ``address`` is past its address's share now: while
        the door is overloaded, heavy guesses admitted from one address are bounded by
        :data:`HEAVY_FLOOR` a second plus :data:`HEAVY_SHARE` of its light ones."""
        if not self.max_limit or not self.overloaded:
            return False
        allowed = HEAVY_FLOOR + HEAVY_SHARE * self.light_in.rate(address, now)
        return self.heavy_in.rate(address, now) >= allowed

    def refusal_hold(self, sender: str, arrived: float) -> float:
        """How long after ``arrived`` a refusal of ``sender``'s request is answered:
        :data:`MIN_REFUSAL_S` (the ``Retry-After``), doubled for each time in a row the
        sender came back before the last refusal's ``Retry-After`` had passed, up to
        :data:`MAX_REFUSAL_S`. A sender that waits its ``Retry-After`` starts again at
        the minimum; a request it sent before its last refusal reached it (one of several
        in flight) is not early. Call :meth:`refusal_answered` as the answer goes out."""
        answered, strikes = self.refused.get(sender, (-math.inf, 0))
        if arrived >= answered + RETRY_AFTER_S:
            strikes = 0
        elif arrived >= answered:
            strikes += 1
        self._refused(sender, answered, strikes)
        return min(MAX_REFUSAL_S, MIN_REFUSAL_S * 2.0 ** min(strikes, 16))

    def refusal_answered(self, sender: str) -> None:
        """A refusal of ``sender``'s has been answered now: its ``Retry-After`` starts."""
        self._refused(sender, self.clock(), self.refused.get(sender, (0.0, 0))[1])

    def _refused(self, sender: str, answered: float, strikes: int) -> None:
        refused = self.refused
        if sender not in refused and len(refused) >= MAX_REFUSED_SENDERS:
            horizon = self.clock() - RETRY_AFTER_S  # its Retry-After has passed: forgotten
            _forget(refused, lambda entry: entry[0] < horizon, MAX_REFUSED_SENDERS // 2)
        refused[sender] = (answered, strikes)

    def idle_after(self, seconds: float) -> float:
        """How long a slot should idle after a heavy request of ``seconds`` (duty cycle)."""
        if self.duty >= 1.0:
            return 0.0
        return min(MAX_IDLE_S, seconds * (1 / self.duty - 1))

    def stats(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "duty": round(self.duty, 3),
            "working": self.working,
            "resting": self.resting,
            "waiting": self.waiting,
            "addresses": len(self.at_door),
            **self.counts,
        }

    async def enter(self, weight: float) -> bool:
        """True with a slot held (hand it back with :meth:`leave`); False: shed."""
        if (
            not self.limit
            or (self.working + self.resting < self.limit and not self.waiting)
            or (weight <= self.light_now and self.working < self.light_limit)
        ):
            self.working += 1
            self.counts["admitted"] += 1
            return True
        if self.waiting >= MAX_WAITING:
            heaviest = self._peek_heaviest()
            self.counts["shed_full"] += 1
            if heaviest is None or heaviest.weight <= weight:
                return False
            self._drop(heaviest)
            if not heaviest.future.done():
                heaviest.future.set_result(False)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(weight, future)
        self._seq += 1
        heapq.heappush(self._lightest, (weight, self._seq, waiter))
        heapq.heappush(self._heaviest, (-weight, -self._seq, waiter))
        self.waiting += 1
        self.counts["queued"] += 1
        try:
            light = weight <= self.light_now
            async with asyncio.timeout(self.wait_s * (LIGHT_PATIENCE if light else 1)):
                granted = await future
        except TimeoutError:
            if future.done() and not future.cancelled():
                granted = future.result()  # answered as the wait ran out
            else:
                granted = False
                self._drop(waiter)
                self.counts["shed_wait"] += 1
        except BaseException:
            # The client left, or the request's deadline passed, while it waited.
            if future.done() and not future.cancelled() and future.result():
                self.leave()  # a slot was handed over just now: pass it on
            else:
                self._drop(waiter)
            raise
        if granted:
            self.counts["admitted"] += 1
        return granted

    def leave(self, rest_s: float = 0.0) -> None:
        """Give the slot back, to the lightest waiting request if it may have it. With
        ``rest_s`` (a heavy request under a duty cycle) the slot rests that long first: it
        counts against the adaptive bound, not against light requests."""
        self.working -= 1
        if rest_s > 0:
            self.resting += 1
            asyncio.get_running_loop().call_later(rest_s, self._rested)
        self._dispatch()

    def _rested(self) -> None:
        self.resting -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Free slots to the lightest waiting requests: a light one while the configured
        bound allows, any other while the adaptive one does (resting slots included)."""
        heap = self._lightest
        while heap:
            waiter = heap[0][2]
            if not waiter.live or waiter.future.done():
                heapq.heappop(heap)  # shed, left, or its wait ran out and it is not yet woken
                self._drop(waiter)
                continue
            if waiter.weight <= self.light_now:
                if self.working >= self.light_limit:
                    return
            elif self.working + self.resting >= self.limit:
                return  # the lightest waiting is heavy, and so is every other
            heapq.heappop(heap)
            waiter.live = False
            self.waiting -= 1
            self.working += 1
            waiter.future.set_result(True)
            self._compact()

    def _drop(self, waiter: _Waiter) -> None:
        if waiter.live:
            waiter.live = False
            self.waiting -= 1
            self._compact()

    def _peek_heaviest(self) -> _Waiter | None:
        heap = self._heaviest
        while heap and (not heap[0][2].live or heap[0][2].future.done()):
            self._drop(heapq.heappop(heap)[2])
        return heap[0][2] if heap else None

    def _compact(self) -> None:
        # Dropped waiters stay in the heaps until popped; rebuild when they are most of it.
        for heap in (self._lightest, self._heaviest):
            if len(heap) > 2 * self.waiting + 64:
                heap[:] = [e for e in heap if e[2].live]
                heapq.heapify(heap)


class Shed:
    """The door's refusal: ``503 overloaded`` (over HTTP) or an ``overloaded`` error frame
    (over the socket), with why."""

    __slots__ = ("answer", "detail", "reason")

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason  # busy (the queue shed it) or address (its address's bound)
        self.detail = detail
        self.answer = _overloaded(detail)


BUSY = Shed(
    "busy",
    f"this server is busy and served lighter senders first; try again in {RETRY_AFTER_S} s",
)
ADDRESS = Shed(
    "address",
    "too many requests in flight from your address; wait for their answers, "
    f"then try again in {RETRY_AFTER_S} s",
)


async def through(
    gate: Gate,
    address: str,
    token: str | None,
    work: Callable[[], Awaitable[T]],
    *,
    now: float,
    bypass: Callable[[], bool] | None = None,
    guess: bool = False,
    authenticated: bool = True,
) -> T | Shed:
    """``work()`` once the door lets it in, else the :class:`Shed` that says why not: the
    one way in for an API request (:class:`Door`) and a socket's guess frame
    (:mod:`web.ws`), so a guess weighs, waits and is shed alike whichever way it came.
    A refusal returns no sooner than :data:`MIN_REFUSAL_S` after ``now`` (its arrival),
    longer for a sender that did not wait its last ``Retry-After``
    (:meth:`Gate.refusal_hold`), its token still counted at the door meanwhile.
    ``bypass()``: True for work answered without backend work (the bucket mirror refuses
    its player), which skips the queue. ``guess``: its time in the slot feeds the
    adaptive bound. ``authenticated``: ``token`` is one this process has authenticated
    (then the request is its player's, weighed by the player's own rate, and within the
    light threshold outside its address's bound and share); False (or no token) weighs the
    address's rate of such requests whole, and keeps the token out of the field's
    sample."""
    address_rate = gate.addresses.hit(address, now)
    tokens = gate.tokens_at_door
    # Counted at arrival, never while waiting: a wait at the door is the server's doing, and
    # an honest player whose one guess waits must not weigh more for it. ``own``: the
    # player's within its honest pace, outside what its address is held to.
    own = False
    if token is None or not authenticated:
        weight = address_rate / ADDRESS_SHARE + gate.anonymous.hit(address, now)
        fast = weight > gate.light_now
        if token is not None:
            # seen lately: a new player's first guess (its token not yet known here) is
            # what makes its second no newcomer
            gate.players.hit(token, now)
    else:
        # A token not seen lately is not known to be light: in the queue's order it waits
        # behind players known to send at an honest pace (200 new mashers at once would
        # otherwise all be new flows, first in line).
        new = 0.0 if token in gate.players else gate.light_now
        rate = gate.players.hit(token, now)
        gate.field(token, rate, now)
        weight = rate + new
        fast = rate > gate.light_now
        own = not fast and tokens.get(token, 0) < PLAYER_IN_FLIGHT
    if token is not None:
        tokens[token] = tokens.get(token, 0) + 1
    # whose early retries lengthen its refusals: a made-up token per request is no sender
    sender = token if token is not None and authenticated else address
    try:
        if not own and not gate.take_address(address, fast=fast):
            gate.counts["shed_address"] += 1
            await hold_refusal(gate, now, sender)
            return ADDRESS
        try:
            if bypass is not None and bypass():
                gate.counts["bypassed"] += 1
                return await work()
            heavy = weight > gate.light_now
            if guess and fast and gate.over_share(address, now):
                gate.counts["shed_share"] += 1
                await hold_refusal(gate, now, sender)
                return BUSY
            if not await gate.enter(weight):
                await hold_refusal(gate, now, sender)
                return BUSY
            if guess:
                (gate.heavy_in if fast else gate.light_in).hit(address, gate.clock())
            began = gate.clock()
            try:
                return await work()
            finally:
                took = gate.clock() - began
                if guess:
                    gate.timed(took)
                gate.leave(gate.idle_after(took) if heavy else 0.0)
        finally:
            if not own:
                gate.release_address(address, fast=fast)
    finally:
        if token is not None:
            _count_down(tokens, token)


async def hold_refusal(gate: Gate, arrived: float, sender: str) -> None:
    """Keep a refusal until :meth:`Gate.refusal_hold` after its request arrived: a client
    that retries without waiting gains nothing by it (a held refusal is a timer, not work)."""
    hold = gate.refusal_hold(sender, arrived) - (gate.clock() - arrived)
    if hold > 0:
        await asyncio.sleep(hold)
    gate.refusal_answered(sender)


def origin_allowed(headers: Headers, allowed: tuple[str, ...]) -> bool:
    """Whether a request's ``Origin`` is the server's own (its ``Host``) or on ``allowed``;
    a request without one (not a browser: Origin is a browser's promise) is allowed."""
    origin = headers.get("origin")
    if origin is None:
        return True
    origin = origin.strip().rstrip("/").lower()
    if origin in {a.strip().rstrip("/").lower() for a in allowed}:
        return True
    host = (headers.get("host") or "").strip().lower()
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc == host


def _cross_site_simple(scope: Scope, allowed: tuple[str, ...]) -> bool:
    """A state-changing request a foreign page could send without a CORS preflight: its
    ``Origin`` is foreign and its body is not declared JSON (a browser preflights an
    ``application/json`` body, and this server answers no preflight)."""
    if scope["method"] not in STATE_CHANGING:
        return False
    # Most writes carry no Origin (not a browser) or a JSON body: one pass over the raw
    # headers decides those without building a Headers.
    origin = media = None
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value
        elif name == b"content-type":
            media = value
    if origin is None or media is not None and _is_json(media):
        return False
    return not origin_allowed(Headers(scope=scope), allowed)


def _is_json(content_type: bytes) -> bool:
    return content_type.partition(b";")[0].strip().lower() == b"application/json"


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class BodyDeadlines:
    """Cancels the requests still reading their body ``seconds`` after they began, on one
    timer that ticks every ``tick`` seconds while any is reading: a request pays a dict
    entry, where an ``asyncio.timeout`` of its own cost as much as the rest of the door.
    A body is late between ``seconds`` and ``seconds + tick``."""

    _LATE = -1.0  # a reader the timer cancelled

    def __init__(self, seconds: float, tick: float = 0.25) -> None:
        self.seconds = seconds
        self.tick = tick
        self._due: dict[asyncio.Task[Any], float] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def read(self, receive: Receive) -> list[Message] | None:
        """:func:`_arrived` within the deadline; :class:`TimeoutError` past it."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._due[task] = loop.time() + self.seconds
        if self._timer is None:
            self._timer = loop.call_later(self.tick, self._sweep, loop)
        try:
            return await _arrived(receive)
        except asyncio.CancelledError:
            if self._due.get(task) != self._LATE:
                raise
            task.uncancel()
            raise TimeoutError from None
        finally:
            del self._due[task]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for task, due in self._due.items():
            if 0 <= due <= now:
                self._due[task] = self._LATE
                task.cancel()
        if self._due:
            self._timer = loop.call_later(self.tick, self._sweep, loop)


async def _arrived(receive: Receive) -> list[Message] | None:
    """The request's body messages, read until the body is whole or past
    ``MAX_BODY_BYTES`` (the app then refuses it 413 in the contract's order); None if the
    client left first."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        messages.append(message)
        size += len(message.get("body", b""))
        if not message.get("more_body", False) or size > MAX_BODY_BYTES:
            return messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that hands out ``messages`` first (the body the door read)."""
    pending = list(reversed(messages))

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed


class Door:
    """ASGI middleware over a :class:`Gate` (see the module docstring). ``peek(scope,
    token)``: True for a guess that will be answered without backend work (the bucket
    mirror refuses its player): it skips the queue. ``known(scope, token)``: True for a
    token this process has authenticated (no I/O). ``allowed_origins``: the origins
    besides the server's own whose pages may write (``Config.allowed_origins``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        gate: Gate,
        peek: Peek | None = None,
        known: Peek | None = None,
        allowed_origins: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.gate = gate
        self.peek = peek
        self.known = known
        self.allowed_origins = allowed_origins
        self.deadlines = BodyDeadlines(BODY_TIMEOUT_S)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _cross_site_simple(scope, self.allowed_origins):
            await error_response(ForeignOrigin())(scope, receive, send)
            return
        gate = self.gate
        client = scope.get("client")
        address = address_key(client[0] if client else "")
        if not scope["path"].startswith("/api/"):
            # Pages, health, metrics: no queue, but one address holds only so many.
            with gate.address_slot(address) as room:
                if room:
                    await self.app(scope, receive, send)
                    return
            await hold_refusal(gate, gate.clock(), address)
            await self._answer(ADDRESS, send)
            return
        declared = _declared_length(scope)
        if declared is None or declared <= MAX_BODY_BYTES:
            try:
                messages = await self.deadlines.read(receive)
            except TimeoutError:
                log.info("request body too slow: %s", scope["path"])
                gate.counts["body_timeout"] += 1
                await error_response(RequestTimeout())(scope, receive, send)
                return
            if messages is None:
                log.info("client left before its request was read: %s", scope["path"])
                return  # nobody to answer
            receive = _replaying(messages, receive)
        now = gate.clock()
        token = _authorization(scope)
        post = scope["method"] == "POST"
        peek = self.peek
        bypass = None
        if token is not None and peek is not None and post:

            def bypass() -> bool:
                return peek(scope, token)

        known = self.known
        shed = await through(
            gate,
            address,
            token,
            lambda: self.app(scope, receive, send),
            now=now,
            bypass=bypass,
            guess=post and scope["path"] == "/api/guesses",
            authenticated=token is not None and (known is None or known(scope, token)),
        )
        if isinstance(shed, Shed):
            await self._answer(shed, send)

    @staticmethod
    async def _answer(shed: Shed, send: Send) -> None:
        start, body = shed.answer
        await send({**start, "headers": list(start["headers"])})
        await send(body)


class GateCollector(Collector):
    """The door's figures for ``/metrics``: requests by what the door did, and now."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def collect(self) -> Iterator[Metric]:
        gate = self.gate
        outcomes = CounterMetricFamily(
            "codemojex_door_requests",
            "API requests by what the door did: admitted (at once or after queueing), "
            "bypassed (a refusal known without Valkey), shed_wait / shed_full / shed_share / "
            "shed_address (503 overloaded), body_timeout (408: the body did not arrive)",
            labels=["outcome"],
        )
        for outcome in (
            "admitted",
            "queued",
            "bypassed",
            "shed_wait",
            "shed_full",
            "shed_share",
            "shed_address",
            "body_timeout",
        ):
            outcomes.add_metric([outcome], gate.counts.get(outcome, 0))
        yield outcomes
        now = GaugeMetricFamily(
            "codemojex_door_requests_now", "API requests at the door now", labels=["state"]
        )
        now.add_metric(["working"], gate.working)
        now.add_metric(["resting"], gate.resting)
        now.add_metric(["waiting"], gate.waiting)
        yield now
        bound = GaugeMetricFamily(
            "codemojex_door_limit", "The door's bound now (adaptive, up to --door-in-flight)"
        )
        bound.add_metric([], gate.limit)
        yield bound
