"""The one way in through the door, for an API request and a socket's guess frame alike,
and the refusal that comes out when it is not let in."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from web.door.gate import Gate
from web.door.rates import count_down
from web.errors import RETRY_AFTER_S, Overloaded, prebuilt_response

# A request without a token this process knows weighs its address's rate of such requests,
# plus its address's rate of all requests over this many. A player's request weighs its own
# rate alone: one address is often many people (a school, an office, a carrier's CGNAT).
ADDRESS_SHARE = 1024.0
# A player within the light threshold has this many of its requests at the door as its own,
# outside its address's bound: a guess and a read, or a guess and its retry. Past that, its
# requests count against its address like any other.
PLAYER_IN_FLIGHT = 2
# A held refusal lasts up to this share longer, at random: senders refused together (a gang
# of mashers that starts at once, 1,600 requests in its first second) would otherwise come
# back together, every refusal hold, as one wave the event loop serves before anyone else
# (bench_door, 200 mashers: waves every ~4 s, the honest players' send→202 at 150-320 ms
# for a second each time; with the jitter no wave after the first).
# Never past HELD_MAX_S, under the 5 s many HTTP clients time out at (see MAX_REFUSAL_S).
HOLD_JITTER = 0.5
HELD_MAX_S = 4.8

T = TypeVar("T")


class Shed:
    """The door's refusal: ``503 overloaded`` (over HTTP) or an ``overloaded`` error frame
    (over the socket), with why."""

    __slots__ = ("answer", "detail", "error", "reason")

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason  # busy (the queue shed it) or address (its address's bound)
        self.detail = detail
        self.error = Overloaded(detail, retry_after_s=RETRY_AFTER_S)
        self.answer = prebuilt_response(self.error)


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
    one way in for an API request (:class:`~web.door.middleware.Door`) and a socket's guess frame
    (:mod:`web.ws`), so a guess weighs, waits and is shed alike whichever way it came.
    A refusal returns no sooner than :data:`~web.door.gate.MIN_REFUSAL_S` after ``now`` (its arrival),
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
    # A player whose own rate is honest waits as patiently as a light one, even while its
    # token is new here and so weighs more (it waits behind the players known to be light):
    # new players keep arriving during an attack, and bench_door's 200 mashers shed 3-9 of
    # ~390 honest guesses when the honest players' first guesses met them: a new token
    # waited only as long as the heavy do, --door-wait-ms.
    patient = False
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
        patient = not fast
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
            if not await gate.enter(weight, patient=patient):
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
            count_down(tokens, token)


async def hold_refusal(gate: Gate, arrived: float, sender: str) -> None:
    """Keep a refusal until :meth:`Gate.refusal_hold` after its request arrived: a client
    that retries without waiting gains nothing by it (a held refusal is a timer, not work).
    Held up to :data:`HOLD_JITTER` longer, at random, so refusals do not come back in step."""
    hold = gate.refusal_hold(sender, arrived)
    hold += random.random() * max(0.0, min(HOLD_JITTER * hold, HELD_MAX_S - hold))
    hold -= gate.clock() - arrived
    if hold > 0:
        await asyncio.sleep(hold)
    gate.refusal_answered(sender)
