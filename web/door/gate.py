"""The door's state: its slots, the queue of waiting requests, the senders' weights and the
refusals' holds, shared by the middleware, the socket's guesses and the metrics."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from web.door.gradient import Gradient
from web.door.rates import FlowRates, count_down, forget
from web.errors import RETRY_AFTER_S

# Senders past the light threshold (players by their own rate, tokenless requests by their
# address's) hold at most this share of their address's bound together: the rest stays for
# that address's sign-ups, pages, socket handshakes and tokens this process has yet to see,
# so mashers behind an address cannot lock its new players out.
FAST_ADDRESS_SHARE = 0.75
MAX_WAITING = 1024
MIN_REFUSAL_S = 1.0
# The longest a refusal is held (a sender that keeps coming back before its Retry-After):
# under the 5 s many HTTP clients time out at (httpx's default), since a client that times
# out opens a new connection, which costs the process more than a held answer.
MAX_REFUSAL_S = 4.0
MAX_REFUSED_SENDERS = 50_000
MAX_IDLE_S = 0.5  # the longest a slot idles after a heavy request under a duty cycle
# A request of a sender this light (requests a second, as weighed) takes a free slot up to
# twice the configured bound even when the adaptive one is lower: honest pace is never queued
# behind the bound that holds the heavy senders back. It lies between the two loads the door
# must tell apart (bench_game, bench_door): 200 players at 5 guesses/s each from one address
# are honest (a threshold of 2 makes them all heavy, and sheds 1,000/s down to 538
# accepted/s), a closed-loop masher with 8 in flight is not (its rate alone passes 10
# within its first answers). The game's own per-player rate is 10 guesses a second. A
# token not seen lately weighs this much.
LIGHT_RATE = 10.0
# The light threshold follows the field (Gate.field): this many times the rate of the
# sender at FIELD_QUANTILE of the field (slowest first), recomputed every FIELD_WINDOW_S,
# never below LIGHT_FLOOR (an honest player's burst of a guess or two in a second) nor above
# LIGHT_RATE. A low quantile, not the median: with the median, 200 mashers beside 100
# honest players set the pace themselves (the threshold rises to 10 and most masher
# requests are light; bench_door's 200-from-20-addresses row lets in 2,976-5,090 masher
# guesses with the median, 1,493-2,312 with the quantile); with the quantile they must be
# four in five of the field's tokens to move it.
FIELD_MULTIPLE = 3.0
FIELD_QUANTILE = 0.2
FIELD_WINDOW_S = 0.5
FIELD_SPAN_S = 5.0
FIELD_MAX_SENDERS = 4096  # the field's sample: a flood of new tokens is not all counted
LIGHT_FLOOR = 2.0
# While the door is overloaded (its adaptive bound below the configured one, or requests
# waiting), an address's heavy guesses (heavy by its senders' rates, see
# web.door.admit.through) are admitted at most at HEAVY_FLOOR a second plus HEAVY_SHARE of
# its light ones: what the mashers of one address are let in is two honest paces, not ten
# (10 mashers at the game's rate each would be 100 accepted guesses a second, each scored
# by the workers on the same cores as the honest players' own), while an address of many
# honest players whose bursts tip a few of them heavy keeps a share in proportion to what
# it sends lightly (bench_game's 1,000/s from 200 players). Two paces, not one: a single
# player spending its bucket's burst still gets past its refill rate, so Valkey refuses it
# and the bucket mirror answers its next guesses 429 without the door.
HEAVY_FLOOR = 2 * LIGHT_RATE
HEAVY_SHARE = 0.25
# A light request waits this many times --door-wait-ms before it is shed: when light ones
# wait, the light slots are held by other light requests, which a CPU-starved process
# finishes slowly (bench_door's 200 mashers: 30 honest requests at ~1 s each hold the 32
# light slots, and at one wait 24 of 365 honest guesses are shed after 0.5 s). Late beats
# refused for an honest pace; the heavy are shed at the target.
LIGHT_PATIENCE = 4
OVERLOAD_FRESH_S = 2.0  # a shrunk bound counts as overload this long after the last guess


class _Waiter:
    __slots__ = ("future", "live", "weight")

    def __init__(self, weight: float, future: asyncio.Future[bool]) -> None:
        self.weight = weight
        self.future = future
        self.live = True


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
        count_down(self.at_door, address)
        if fast:
            count_down(self.fast_at_door, address)

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
            forget(refused, lambda entry: entry[0] < horizon, MAX_REFUSED_SENDERS // 2)
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

    async def enter(self, weight: float, *, patient: bool = False) -> bool:
        """True with a slot held (hand it back with :meth:`leave`); False: shed. A light
        request (``weight`` within the threshold), or a ``patient`` one, waits
        :data:`LIGHT_PATIENCE` times the target before it is shed."""
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
            light = patient or weight <= self.light_now
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
