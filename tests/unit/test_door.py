"""The door's parts on their own: the address key (an IPv6 /64 is one address), the bucket
mirror's bound, the senders' rates, and the gate's order (lightest first, heaviest shed).
The door on a real server is tests/web/test_door.py."""

from __future__ import annotations

import asyncio
import math

import pytest
from starlette.types import Message

from codemojex.admission import BucketMirror, address_key
from web.door.admit import HELD_MAX_S, HOLD_JITTER, Shed, hold_refusal, through
from web.door.body import BodyDeadlines
from web.door.gate import (
    HEAVY_FLOOR,
    LIGHT_PATIENCE,
    LIGHT_RATE,
    MAX_REFUSAL_S,
    MAX_WAITING,
    MIN_REFUSAL_S,
    Gate,
)
from web.door.rates import FlowRates
from web.errors import RETRY_AFTER_S


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- what one address is -------------------------------------------------------------------------


def test_an_ipv6_address_counts_by_its_64_and_ipv4_as_itself() -> None:
    assert address_key("203.0.113.7") == "203.0.113.7"
    assert address_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    # Any host of one /64 is the same subscriber: it may pick addresses at will.
    assert address_key("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64"
    assert address_key("2001:0db8:0001:0002:0000:0000:0000:0009") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"  # the next /64 is another
    assert address_key("fe80::1%eth0") == "fe80::/64"
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"  # IPv4-mapped: the IPv4 one
    assert address_key("::1") == "::/64"
    assert address_key("") == ""
    assert address_key(None) == ""
    assert address_key("testclient") == "testclient"  # not an address: as given


# -- the bucket mirror --------------------------------------------------------------------------


class Bucket:
    """The enqueue script's bucket, exactly (lane_enqueue.lua), on a clock of its own."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens: float = burst
        self.at = clock()

    def take(self) -> int:
        """0: taken; else the script's retry_ms."""
        now = self.clock() * 1000
        tokens = min(self.burst, self.tokens + max(0, now - self.at * 1000) * self.rate / 1000)
        if tokens < 1:
            return max(1, math.ceil((1 - tokens) * 1000 / self.rate))
        self.tokens, self.at = tokens - 1, self.clock()
        return 0


def test_the_mirror_refuses_only_while_the_script_certainly_would() -> None:
    clock = Clock()
    bucket = Bucket(10, 5, clock)
    mirror = BucketMirror(10, 5, clock=clock)
    asked = local = 0
    for step in range(4000):
        clock.t += 0.013 if step % 7 else 0.0011  # bursts and pauses
        if mirror.wait_s("p") > 0:
            local += 1
            assert bucket.take() > 0, f"the mirror refused what the script accepts ({step})"
            bucket.tokens = bucket.tokens  # a refusal changes nothing
            continue
        asked += 1
        mark = mirror.mark("p")
        retry_ms = bucket.take()
        if retry_ms:
            mirror.refused("p", retry_ms, mark)
        else:
            mirror.took("p", mark)
    # At ~80 tries a second against 10 a second, most refusals are known locally.
    assert local > asked, (local, asked)


def test_other_processes_taking_tokens_never_make_the_mirror_refuse_wrongly() -> None:
    clock = Clock()
    bucket = Bucket(5, 3, clock)
    ours = BucketMirror(5, 3, clock=clock)
    for step in range(3000):
        clock.t += 0.01
        if step % 3 == 0:  # another web process, whose answers we never see
            bucket.take()
            continue
        if ours.wait_s("p") > 0:
            assert bucket.take() > 0
            continue
        mark = ours.mark("p")
        retry_ms = bucket.take()
        if retry_ms:
            ours.refused("p", retry_ms, mark)
        else:
            ours.took("p", mark)


def test_an_answer_read_late_never_counts_a_take_twice() -> None:
    clock = Clock()
    bucket = Bucket(1, 2, clock)
    mirror = BucketMirror(1, 2, clock=clock)
    first = mirror.mark("p")  # sent ...
    assert bucket.take() == 0
    second = mirror.mark("p")
    assert bucket.take() == 0
    third = mirror.mark("p")
    retry_ms = bucket.take()
    assert retry_ms > 0
    mirror.refused("p", retry_ms, third)  # ... the refusal is read first,
    mirror.took("p", first)  # the acceptances after it
    mirror.took("p", second)
    clock.t += retry_ms / 1000 + 0.002
    assert mirror.wait_s("p") == 0  # the token the script has again is asked for
    assert bucket.take() == 0


def test_the_mirror_forgets_a_full_bucket_and_is_bounded() -> None:
    clock = Clock()
    mirror = BucketMirror(10, 2, max_subjects=100, clock=clock)
    mirror.refused("p", 100, mirror.mark("p"))
    assert 0 < mirror.wait_s("p") <= 0.1
    clock.t += 1
    assert mirror.wait_s("p") == 0 and len(mirror) == 0
    for i in range(1000):
        mirror.refused(f"p{i}", 100, mirror.mark(f"p{i}"))
        clock.t += 0.001
    assert len(mirror) <= 100
    assert mirror.wait_s("p999") > 0  # the newest bounds stay
    off = BucketMirror(0, 20, clock=clock)
    off.refused("p", 100, off.mark("p"))
    assert off.wait_s("p") == 0


# -- senders' rates -----------------------------------------------------------------------------


def test_a_senders_rate_is_its_recent_requests_a_second() -> None:
    rates = FlowRates(tau_s=2.0, max_keys=1000)
    t = 0.0
    for _ in range(400):  # 100 a second for 4 s
        t += 0.01
        fast = rates.hit("masher", t)
    assert 80 < fast < 100
    for _ in range(2):  # one every 3 s
        t += 3
        slow = rates.hit("honest", t)
    assert slow < 1
    assert rates.rate("masher", t + 10) < fast / 100  # quiet: it fades
    for i in range(5000):
        rates.hit(i, t)
    assert len(rates) <= 1000


# -- the gate -----------------------------------------------------------------------------------


async def _hold(gate: Gate, weight: float, order: list[float], release: asyncio.Event) -> bool:
    if not await gate.enter(weight):
        order.append(-weight)
        return False
    order.append(weight)
    await release.wait()
    gate.leave()
    return True


async def test_a_free_slot_goes_to_the_lightest_waiting_request() -> None:
    # light_rate=0: no request skips the bound, so the queue's own order shows
    gate = Gate(limit=1, wait_ms=5_000, address_limit=0, light_rate=0.0)
    release = asyncio.Event()
    order: list[float] = []
    first = asyncio.create_task(_hold(gate, 50.0, order, release))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(_hold(gate, w, order, release)) for w in (40.0, 90.0, 0.3)]
    await asyncio.sleep(0)
    assert (gate.working, gate.waiting) == (1, 3)
    release.set()
    assert all(await asyncio.gather(first, *waiting))
    assert order == [50.0, 0.3, 40.0, 90.0]
    assert (gate.working, gate.waiting) == (0, 0)


async def test_a_request_waiting_past_the_target_is_shed() -> None:
    gate = Gate(limit=1, wait_ms=50, address_limit=0, light_rate=0.0)
    release = asyncio.Event()
    order: list[float] = []
    holder = asyncio.create_task(_hold(gate, 1.0, order, release))
    await asyncio.sleep(0)
    assert await gate.enter(5.0) is False
    assert gate.counts["shed_wait"] == 1 and gate.waiting == 0
    release.set()
    await holder
    assert gate.working == 0


async def test_a_full_queue_sheds_its_heaviest_first() -> None:
    gate = Gate(limit=1, wait_ms=10_000, address_limit=0, light_rate=0.0)
    release = asyncio.Event()
    order: list[float] = []
    holder = asyncio.create_task(_hold(gate, 1.0, order, release))
    await asyncio.sleep(0)
    heavy = [asyncio.create_task(_hold(gate, 100.0, order, release)) for _ in range(MAX_WAITING)]
    await asyncio.sleep(0)
    assert gate.waiting == MAX_WAITING
    # A light newcomer takes the place of a heavy waiter, which is shed at once ...
    light = asyncio.create_task(_hold(gate, 0.5, order, release))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert gate.counts["shed_full"] == 1 and gate.waiting == MAX_WAITING
    # ... and a newcomer as heavy as any waiter is the one shed.
    assert await gate.enter(100.0) is False
    assert gate.counts["shed_full"] == 2
    release.set()
    results = await asyncio.gather(holder, light, *heavy)
    assert results.count(False) == 1
    # the holder; the heavy waiter shed to make room; the light one, served next
    assert order[:3] == [1.0, -100.0, 0.5]
    assert (gate.working, gate.waiting) == (0, 0)


async def test_a_waiter_that_leaves_passes_its_slot_on() -> None:
    gate = Gate(limit=1, wait_ms=10_000, address_limit=0, light_rate=0.0)
    release = asyncio.Event()
    order: list[float] = []
    holder = asyncio.create_task(_hold(gate, 1.0, order, release))
    await asyncio.sleep(0)
    gone = asyncio.create_task(_hold(gate, 0.1, order, release))
    after = asyncio.create_task(_hold(gate, 2.0, order, release))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    release.set()
    assert await holder and await after
    assert (gate.working, gate.waiting) == (0, 0)


async def test_light_requests_may_hold_twice_the_bound_heavy_ones_not() -> None:
    gate = Gate(limit=2, wait_ms=50, address_limit=0, light_rate=10.0)
    release = asyncio.Event()
    order: list[float] = []
    light = [asyncio.create_task(_hold(gate, 5.0, order, release)) for _ in range(4)]
    await asyncio.sleep(0)
    assert (gate.working, gate.waiting) == (4, 0)  # an honest crowd's burst: no wait
    assert await gate.enter(20.0) is False  # a heavy sender waits for the bound, and is shed
    release.set()
    assert all(await asyncio.gather(*light))


async def test_under_overload_an_address_heavy_admissions_keep_to_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("web.door.gate.MIN_REFUSAL_S", 0.0)  # no held refusals on a test's clock
    clock = Clock()
    gate = Gate(limit=4, wait_ms=50, address_limit=0, clock=clock)

    async def work() -> str:
        return "served"

    async def masher(address: str = "10.0.0.2") -> object:
        clock.t += 0.01
        return await through(gate, address, "masher", work, now=clock.t, guess=True)

    # Not overloaded: a sender is let in as fast as it asks (80 in 0.8 s; heavy from the
    # ~20th, when its rate passes an honest pace).
    assert [await masher() for _ in range(80)] == ["served"] * 80
    assert gate.heavy_in.rate("10.0.0.2", clock.t) > HEAVY_FLOOR
    # The gradient shrank the bound: that address's heavy guesses are past its share ...
    gate.limit, gate.timed_at = 2, clock.t
    assert gate.overloaded
    shed = await masher()
    assert isinstance(shed, Shed) and shed.reason == "busy"
    assert gate.counts["shed_share"] == 1
    # ... another address's are not, and an honest pace is never shed for it,
    assert await through(gate, "10.0.0.3", "newcomer", work, now=clock.t, guess=True) == "served"
    assert await through(gate, "10.0.0.2", "masher", work, now=clock.t) == "served"  # a read
    clock.t += 1
    gate.timed_at = clock.t
    assert await through(gate, "10.0.0.2", "honest", work, now=clock.t, guess=True) == "served"
    # ... and the address's share comes back as its heavy rate decays,
    clock.t += 10
    gate.timed_at = clock.t
    assert await masher() == "served"
    # ... as it does when no guess has fed the bound lately (it says nothing of now).
    for _ in range(80):
        await masher()
    clock.t += 2.5
    assert not gate.overloaded and await masher() == "served"
    # An address that sends much lightly (an honest crowd) has a share in proportion.
    for _ in range(400):
        gate.light_in.hit("10.0.0.4", clock.t)
    for _ in range(40):
        gate.heavy_in.hit("10.0.0.4", clock.t)
    assert not gate.over_share("10.0.0.4", clock.t)
    assert gate.over_share("10.0.0.5", clock.t) is False  # nothing of its own yet
    assert (gate.working, gate.waiting, gate.tokens_at_door, gate.at_door) == (0, 0, {}, {})


def test_the_light_threshold_follows_the_field_it_arrives_with() -> None:
    clock = Clock()
    gate = Gate(limit=16, wait_ms=500, address_limit=0, clock=clock)
    assert gate.light_now == LIGHT_RATE  # nothing seen yet: the game's own rate

    # 100 players at 0.3 guesses/s each and one at 5/s: the field's median is an honest
    # pace, three times it is under the floor, so the floor (2/s) holds and 5/s is heavy.
    start = clock.t
    for t in range(0, 10_000, 10):  # interleaved, in time order: 10 ms steps
        clock.t = start + t / 1000
        for i in range(100):
            if (t + i * 33) % 3330 == 0:
                gate.field(f"honest-{i}", gate.players.hit(f"honest-{i}", clock.t), clock.t)
        if t % 200 == 0:
            gate.field("fast", gate.players.hit("fast", clock.t), clock.t)
    assert gate.light_now == pytest.approx(2.0)
    assert gate.players.rate("fast", clock.t) > gate.light_now
    # 200 players at 5/s each (bench_game's 1,000/s from one address): one of the crowd.
    crowd = Gate(limit=16, wait_ms=500, address_limit=0, clock=clock)
    start = clock.t
    for t in range(0, 6_000, 1):
        clock.t = start + t / 1000
        token = f"p{t % 200}"  # a guess a millisecond, each player's every 200 ms
        crowd.field(token, crowd.players.hit(token, clock.t), clock.t)
    assert crowd.light_now == LIGHT_RATE
    assert max(crowd.players.rate(f"p{i}", clock.t) for i in range(200)) < crowd.light_now
    # 200 mashers at 8 requests/s beside 100 honest players at 0.3/s (bench_door's 200
    # from 20 addresses): more mashers than honest players do not set the pace themselves.
    mobbed = Gate(limit=16, wait_ms=500, address_limit=0, clock=clock)
    start = clock.t
    for t in range(0, 6_000, 5):
        clock.t = start + t / 1000
        for i in range(100):
            if (t + i * 35) % 3500 == 0:
                token = f"honest-{i}"
                mobbed.field(token, mobbed.players.hit(token, clock.t), clock.t)
        if t % 125 == 0:
            for i in range(200):
                token = f"masher-{i}"
                mobbed.field(token, mobbed.players.hit(token, clock.t), clock.t)
    assert mobbed.light_now == pytest.approx(2.0)
    assert min(mobbed.players.rate(f"masher-{i}", clock.t) for i in range(200)) > 2.0


async def test_an_honest_crowd_piled_up_at_the_door_is_not_charged_to_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # bench_game at 1,000/s: 200 players at 5 guesses/s each from one address, on a web
    # the CPU starves, so each player has a few requests waiting at the door at once. By
    # their rates they are light; the requests at the door order them in the queue, but
    # charging those to the address's share shed ~1 % of the crowd (503 overloaded).
    monkeypatch.setattr("web.door.gate.MIN_REFUSAL_S", 0.0)
    clock = Clock()
    gate = Gate(limit=16, wait_ms=500, address_limit=0, clock=clock)

    async def work() -> str:
        return "served"

    answers = []
    for t in range(4_000):  # a guess a millisecond, each player's every 200 ms, for 4 s
        clock.t += 0.001
        token = f"p{t % 200}"
        gate.tokens_at_door[token] = 3  # three of its requests still waiting
        gate.limit, gate.timed_at = 4, clock.t  # the bound has shrunk: overloaded
        answers.append(await through(gate, "10.0.0.9", token, work, now=clock.t, guess=True))
        del gate.tokens_at_door[token]
    assert gate.light_now == LIGHT_RATE
    assert gate.counts["shed_share"] == 0
    assert answers == ["served"] * 4_000


async def test_a_light_request_waits_longer_than_the_target_before_it_is_shed() -> None:
    gate = Gate(limit=1, wait_ms=50, address_limit=0, light_rate=10.0)
    release = asyncio.Event()
    order: list[float] = []
    held = [asyncio.create_task(_hold(gate, 1.0, order, release)) for _ in range(2)]
    await asyncio.sleep(0)
    assert gate.working == gate.light_limit == 2  # the light slots are all held
    heavy = asyncio.create_task(gate.enter(20.0))
    light = asyncio.create_task(gate.enter(1.0))
    await asyncio.sleep(0.1)  # twice the target: the heavy one is shed, the light one waits
    assert heavy.done() and heavy.result() is False
    assert not light.done() and gate.waiting == 1
    release.set()  # a held slot frees (well within LIGHT_PATIENCE x the target)
    assert await light is True
    await asyncio.gather(*held)
    gate.leave()
    assert (gate.working, gate.waiting) == (0, 0)
    assert LIGHT_PATIENCE * 0.05 > 0.1


async def test_a_new_player_at_an_honest_pace_waits_as_patiently_as_a_known_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A token the door has not seen weighs more (it waits behind the players known to be
    # light), but by its own rate it is honest: it is not shed at the heavy's target while
    # a known masher beside it is.
    monkeypatch.setattr("web.door.gate.MIN_REFUSAL_S", 0.0)  # the masher's refusal, unheld
    gate = Gate(limit=1, wait_ms=100, address_limit=0, light_rate=10.0)
    for i in range(60):  # a masher: 60 guesses in the last second
        gate.players.hit("masher", gate.clock() - 1.0 + i / 60)
    release = asyncio.Event()
    order: list[float] = []
    held = [asyncio.create_task(_hold(gate, 1.0, order, release)) for _ in range(2)]
    await asyncio.sleep(0)
    assert gate.working == gate.light_limit == 2  # the light slots are all held

    async def work() -> str:
        return "served"

    def send(token: str) -> asyncio.Task[str | Shed]:
        return asyncio.create_task(through(gate, "10.0.0.2", token, work, now=gate.clock()))

    masher, newcomer = send("masher"), send("newcomer")
    await asyncio.sleep(0.2)  # twice the target
    assert masher.done() and isinstance(masher.result(), Shed)
    assert not newcomer.done() and gate.waiting == 1
    release.set()  # a held slot frees (well within LIGHT_PATIENCE x the target)
    assert await newcomer == "served"
    await asyncio.gather(*held)
    assert (gate.working, gate.waiting) == (0, 0)
    assert LIGHT_PATIENCE * 0.1 >= 2 * 0.2


def test_a_sender_that_does_not_wait_its_retry_after_is_held_longer_each_time() -> None:
    clock = Clock()
    gate = Gate(limit=1, wait_ms=50, address_limit=0, clock=clock)

    def refused(sender: str) -> float:
        """A request of ``sender`` arriving now, refused; the answer goes out after its hold."""
        hold = gate.refusal_hold(sender, clock.t)
        clock.t += hold
        gate.refusal_answered(sender)
        return hold

    # Back at once after each refusal: held 1, 2, 4, 4 s (the cap, under clients' timeouts).
    assert [refused("masher") for _ in range(4)] == [1.0, 2.0, 4.0, MAX_REFUSAL_S]
    # A sender that waits its Retry-After is held the minimum, and so is the masher again
    # once it waits.
    for sender in ("patient", "masher"):
        for _ in range(3):
            clock.t += RETRY_AFTER_S
            assert refused(sender) == MIN_REFUSAL_S
    # Requests sent before the last refusal reached the sender (several in flight at
    # once) are not early: a client with eight requests out gets eight plain refusals.
    sent = clock.t
    holds = [gate.refusal_hold("eight", sent) for _ in range(8)]
    clock.t += 1.0
    for _ in range(8):
        gate.refusal_answered("eight")
    assert holds == [MIN_REFUSAL_S] * 8
    assert gate.refusal_hold("eight", sent) == MIN_REFUSAL_S  # one more sent back then
    assert gate.refusal_hold("eight", clock.t) == 2 * MIN_REFUSAL_S  # one sent just now


async def test_held_refusals_are_spread_so_senders_refused_together_come_back_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each held refusal lasts its hold plus a random share of it (at most HOLD_JITTER, and
    never past HELD_MAX_S): a gang refused at once is answered over a spread of times."""
    clock = Clock()
    gate = Gate(limit=1, wait_ms=50, address_limit=0, clock=clock)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("web.door.admit.asyncio.sleep", sleep)
    for i in range(200):
        await hold_refusal(gate, clock.t, f"masher-{i}")
    assert all(MIN_REFUSAL_S <= s <= MIN_REFUSAL_S * (1 + HOLD_JITTER) for s in slept)
    assert max(slept) - min(slept) > 0.8 * HOLD_JITTER * MIN_REFUSAL_S  # spread, not in step
    slept.clear()
    gate.refused["early"] = (clock.t, 8)  # a sender back early again and again: the cap
    for _ in range(50):
        await hold_refusal(gate, clock.t, "early")
        gate.refused["early"] = (clock.t, 8)
    assert all(MAX_REFUSAL_S <= s <= HELD_MAX_S for s in slept)
    assert max(slept) - min(slept) > 0.5 * (HELD_MAX_S - MAX_REFUSAL_S)


async def test_an_address_sending_many_requests_without_a_token_is_heavy_by_its_own_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("web.door.gate.MIN_REFUSAL_S", 0.0)  # no held refusals on a test's clock
    clock = Clock()
    gate = Gate(limit=1, wait_ms=20, address_limit=0, clock=clock)

    async def work() -> str:
        return "served"

    # 40 tokenless requests in a second from one address: 20 a second, twice an honest pace.
    for _ in range(40):
        clock.t += 0.025
        assert await through(gate, "10.0.0.2", None, work, now=clock.t) == "served"
    assert await gate.enter(0.0)  # the one slot is busy: only light requests pass it now
    try:
        shed = await through(gate, "10.0.0.2", None, work, now=clock.t)
        assert isinstance(shed, Shed) and shed.reason == "busy"
        # Another address's first tokenless request is light: it takes a light slot.
        assert await through(gate, "10.0.0.3", None, work, now=clock.t) == "served"
    finally:
        gate.leave()


def test_only_authenticated_senders_move_the_light_threshold() -> None:
    clock = Clock()
    gate = Gate(limit=4, wait_ms=50, address_limit=0, clock=clock)

    async def work() -> str:
        return "served"

    async def send(token: str, authenticated: bool) -> None:
        await through(gate, "10.0.0.2", token, work, now=clock.t, authenticated=authenticated)

    # Two players at 8 a second, and 16 made-up tokens a second beside them, for 3 s.
    for tick in range(48):
        clock.t += 1 / 16
        if tick % 2 == 0:
            asyncio.run(send("honest-1", True))
            asyncio.run(send("honest-2", True))
        asyncio.run(send(f"random-{tick}", False))
    assert gate.light_now == LIGHT_RATE


async def test_a_body_deadline_times_out_a_late_body_and_passes_on_an_outside_cancel() -> None:
    deadlines = BodyDeadlines(0.05, tick=0.01)
    never = asyncio.Event()

    async def stalled() -> Message:
        await never.wait()
        raise AssertionError("no body ever comes")

    async def whole() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    assert await deadlines.read(whole) == [await whole()]
    with pytest.raises(TimeoutError):
        await deadlines.read(stalled)
    reader = asyncio.create_task(deadlines.read(stalled))
    await asyncio.sleep(0.01)
    reader.cancel()  # a shutdown, a client gone: not a late body
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert not deadlines._due  # every reader's entry is gone
