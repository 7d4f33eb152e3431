"""The door of a web process: how many API requests it works on at once, who waits, who is
shed (CONTRACT §4, Overload).

Without a door, every request a client sent was worked on at once: past ~100 in flight
redis-py's pool refused them all alike (``MaxConnectionsError``, ``503 unavailable`` to
everyone), and below that the event loop served a masher's hundreds of requests and an
honest player's one first come, first served. :class:`Door` (ASGI middleware, ``/api/``
paths only; pages, static files, health, metrics and websockets pass untouched) does what
nginx's ``limit_conn``, fq_codel and a fixed-limit concurrency limiter do together:

* **A bound.** At most ``limit`` requests are worked on at once; the Valkey pool is sized
  above it (``codemojex.game.pool_size``) and waits rather than fails, so the pool is never
  the cliff.
* **Lightest first.** A request past the bound waits. Each request is weighed at arrival by
  its sender's recent request rate — an exponentially decaying count per player (its bearer
  token) and per client address (:func:`codemojex.admission.address_key`: an IPv6 /64 is
  one address), the address's rate divided by :data:`ADDRESS_SHARE` (a classroom behind
  one NAT is many players) — and a free slot goes to the lightest waiting request. As in
  fq_codel's new flows first, a player sending at an honest pace is served next, however
  many requests a masher has waiting.
* **Heaviest shed.** A request that has waited ``wait_s`` (the queue-delay target, as in
  CoDel) is shed; under sustained overload those are the heaviest senders', which are never
  the lightest waiting. When :data:`MAX_WAITING` wait, the heaviest one is shed at once to
  make room (the newcomer itself if it is the heaviest). Shed: ``503 overloaded`` with
  ``Retry-After``.
* **Per address.** One client address has at most ``address_limit`` requests at the door,
  working or waiting; more are refused ``503 overloaded`` at once.
* **Refusals that cost little.** A guess from a player the bucket mirror already refuses
  (:class:`codemojex.admission.BucketMirror`) goes around the queue: it is answered
  ``429`` without a Valkey round trip, so it needs no slot. No ``503 overloaded`` leaves
  sooner than :data:`MIN_REFUSAL_S` after its request arrived: a client that retries
  without waiting (ignoring ``Retry-After``) holds its connection that long per try
  instead of looping at the server's speed; a held refusal is a timer, not work.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemojex.admission import address_key

__all__ = ["Door", "FlowRates", "Gate", "GateCollector"]

# An address's rate counts as this many players' (a NAT, a campus proxy) when weighing.
ADDRESS_SHARE = 16.0
# The time constant of the rate estimates: a sender's rate is its requests over ~2 s.
RATE_TAU_S = 2.0
MAX_WAITING = 1024
MIN_REFUSAL_S = 0.25
RETRY_AFTER_S = 1
MAX_TOKEN_BYTES = 300  # a longer Authorization header is no token (401): weighed by address
# The adaptive bound (:class:`Gradient`): a guess's time at the door may grow to this many
# times its unloaded time before the bound shrinks; never below MIN_LIMIT.
TOLERANCE = 1.5
MIN_LIMIT = 2
BASELINE_S = 30  # the unloaded time: the quietest second's mean of the last 30

Peek = Callable[[Scope, str], bool]


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

    def rate(self, key: Any, now: float) -> float:
        entry = self._counts.get(key)
        if entry is None:
            return 0.0
        return entry[0] * math.exp((entry[1] - now) / self.tau_s) / self.tau_s

    def _prune(self, now: float) -> None:
        tau = self.tau_s
        quiet = [k for k, (v, t) in self._counts.items() if v * math.exp((t - now) / tau) < 0.5]
        for key in quiet:
            del self._counts[key]
        excess = len(self._counts) - self.max_keys // 2
        if excess > 0:  # a flood of new keys: keep the newest half
            for key in list(self._counts)[:excess]:
                del self._counts[key]


class Gradient:
    """The door's bound, adapted to how long guesses take inside it (after Netflix's
    gradient limiter): when the recent time of a guess (an EWMA of the last few) grows past
    :data:`TOLERANCE` times its unloaded time (the quietest second of the last
    :data:`BASELINE_S`), the bound shrinks in proportion, down to :data:`MIN_LIMIT`; while
    it stays within, the bound grows by one per update, back up to the configured one. A
    bound that is not being used (fewer than half its slots busy) is left as it is.

    The process's own work is what grows a guess's time: a busy event loop, a CPU the
    machine's other processes want, a slower Valkey. A smaller bound then queues more at
    the door, where light senders go first and the heaviest are shed, instead of in the
    event loop, first come first served."""

    def __init__(self, max_limit: int, min_limit: int = MIN_LIMIT) -> None:
        self.max_limit = max_limit
        self.min_limit = min(min_limit, max_limit)
        self.value = float(max_limit)
        self.recent: float | None = None
        self.baseline: float | None = None
        self._seconds: list[tuple[int, float, int]] = []  # (second, sum, count)
        self._n = 0

    def sample(self, seconds: float, now: float, busy: int) -> int:
        """One guess's time in its slot; the bound to apply from now."""
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
            return int(self.value)
        gradient = max(0.5, min(1.0, TOLERANCE * self.baseline / self.recent))
        target = self.value * gradient + 1
        self.value = max(self.min_limit, min(self.max_limit, 0.8 * self.value + 0.2 * target))
        return int(self.value)


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


_BUSY = _overloaded(
    f"this server is busy and served lighter senders first; try again in {RETRY_AFTER_S} s"
)
_ADDRESS = _overloaded(
    "too many requests in flight from your address; wait for their answers, "
    f"then try again in {RETRY_AFTER_S} s"
)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 0 or wait_ms < 0 or address_limit < 0:
            raise ValueError("door limits must be >= 0 (0 = off)")
        self.limit = limit  # the bound now: the gradient's, up to the configured one
        self.gradient = Gradient(limit) if limit and adaptive else None
        self.wait_s = wait_ms / 1000
        self.address_limit = address_limit
        self.clock = clock
        self.players = FlowRates()
        self.addresses = FlowRates()
        self.working = 0
        self.waiting = 0
        self._lightest: list[tuple[float, int, _Waiter]] = []
        self._heaviest: list[tuple[float, int, _Waiter]] = []
        self._seq = 0
        self.at_door: dict[str, int] = {}  # address -> requests working or waiting
        # admitted, queued, bypassed, shed_wait, shed_full, shed_address
        self.counts: Counter[str] = Counter()

    def timed(self, seconds: float) -> None:
        """A guess held a slot for ``seconds``: the gradient may move the bound."""
        if self.gradient is not None:
            self.limit = self.gradient.sample(seconds, self.clock(), self.working)

    def stats(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "working": self.working,
            "waiting": self.waiting,
            "addresses": len(self.at_door),
            **self.counts,
        }

    async def enter(self, weight: float) -> bool:
        """True with a slot held (hand it back with :meth:`leave`); False: shed."""
        if not self.limit or (self.working < self.limit and not self.waiting):
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
            async with asyncio.timeout(self.wait_s):
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

    def leave(self) -> None:
        """Hand the slot to the lightest waiting request, or free it (or, when the bound
        has shrunk below the slots in use, retire it)."""
        heap = self._lightest
        while heap and self.working <= self.limit:
            waiter = heapq.heappop(heap)[2]
            if waiter.live:
                waiter.live = False
                self.waiting -= 1
                if waiter.future.done():
                    continue  # cancelled (its wait ran out, or it left) and not yet woken
                waiter.future.set_result(True)  # the slot passes on: working stays
                self._compact()
                return
        self.working -= 1

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


class Door:
    """ASGI middleware over a :class:`Gate` (see the module docstring). ``peek(scope,
    token)``: True for a guess that will be answered without backend work (the bucket
    mirror refuses its player): it skips the queue."""

    def __init__(self, app: ASGIApp, *, gate: Gate, peek: Peek | None = None) -> None:
        self.app = app
        self.gate = gate
        self.peek = peek

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        gate = self.gate
        now = gate.clock()
        client = scope.get("client")
        address = address_key(client[0] if client else "")
        token = _authorization(scope)
        weight = gate.addresses.hit(address, now) / ADDRESS_SHARE
        if token is not None:
            weight = max(weight, gate.players.hit(token, now))
        at_door = gate.at_door
        held = at_door.get(address, 0)
        if gate.address_limit and held >= gate.address_limit:
            gate.counts["shed_address"] += 1
            await self._refuse(_ADDRESS, now, send)
            return
        at_door[address] = held + 1
        try:
            if (
                token is not None
                and self.peek is not None
                and scope["method"] == "POST"
                and self.peek(scope, token)
            ):
                gate.counts["bypassed"] += 1
                await self.app(scope, receive, send)
                return
            if not await gate.enter(weight):
                await self._refuse(_BUSY, now, send)
                return
            began = gate.clock()
            try:
                await self.app(scope, receive, send)
            finally:
                if scope["method"] == "POST" and scope["path"] == "/api/guesses":
                    gate.timed(gate.clock() - began)
                gate.leave()
        finally:
            left = at_door[address] - 1
            if left:
                at_door[address] = left
            else:
                del at_door[address]

    async def _refuse(self, answer: tuple[Message, Message], arrived: float, send: Send) -> None:
        hold = MIN_REFUSAL_S - (self.gate.clock() - arrived)
        if hold > 0:
            await asyncio.sleep(hold)
        start, body = answer
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
            "bypassed (a refusal known without Valkey), shed_wait / shed_full / shed_address "
            "(503 overloaded)",
            labels=["outcome"],
        )
        for outcome in ("admitted", "queued", "bypassed", "shed_wait", "shed_full", "shed_address"):
            outcomes.add_metric([outcome], gate.counts.get(outcome, 0))
        yield outcomes
        now = GaugeMetricFamily(
            "codemojex_door_requests_now", "API requests at the door now", labels=["state"]
        )
        now.add_metric(["working"], gate.working)
        now.add_metric(["waiting"], gate.waiting)
        yield now
        bound = GaugeMetricFamily(
            "codemojex_door_limit", "The door's bound now (adaptive, up to --door-in-flight)"
        )
        bound.add_metric([], gate.limit)
        yield bound
