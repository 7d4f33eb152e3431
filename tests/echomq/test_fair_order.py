"""Fair order of the lanes: the real scripts follow the pure model claim by claim, and the
model keeps both bounds of ``docs/load.md`` ("Fair order: sparse lanes first") over long
random runs, whatever the arrivals.

The model is ``tests/echomq/fair_order.py``. Against the session's real ``valkey-server`` a
Hypothesis property drives enqueues, claims (single and batched), releases, retries due at
once (promoted by the next claim) and reaped leases, and after every step compares the
claimed ids and the ``new`` / ``ring`` / ``owed`` keys with the model's.

``CODEMOJEX_HYPOTHESIS_EXAMPLES`` raises the number of examples (default 60).
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import echomq
from echomq.codec import text
from tests.echomq.fair_order import Bounds, FairLanes

EXAMPLES = int(os.environ.get("CODEMOJEX_HYPOTHESIS_EXAMPLES", "60"))
LANES = ("a", "b", "c", "d", "e")
LEASE_MS = 600_000
WORKER = "WRK_fair"
MAX_ATTEMPTS = 1_000  # no job dies during a run: stalls and failures all come back

# -- the real scripts against the model, step by step ----------------------------------------

Op = tuple[str, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(0, len(LANES) - 1)),
        st.tuples(st.just("enqueue"), st.integers(0, len(LANES) - 1)),  # twice as likely
        st.tuples(st.just("claim"), st.integers(1, 3)),
        st.tuples(st.just("release"), st.integers(0, 99)),
        st.tuples(st.just("retry_now"), st.integers(0, 99)),
        st.tuples(st.just("reap"), st.integers(0, 99)),
    ),
    max_size=40,
)


@dataclass
class Held:
    lane: str
    token: int


@dataclass
class Run:
    q: echomq.Queue
    model: FairLanes = field(default_factory=FairLanes)
    held: dict[str, Held] = field(default_factory=dict)
    due: list[tuple[float, str, str]] = field(default_factory=list)  # (score, id, lane)

    async def step(self, op: str, arg: int) -> None:
        if op == "enqueue":
            lane = LANES[arg]
            jid = await self.q.lanes.enqueue(lane, {"n": arg}, max_attempts=MAX_ATTEMPTS)
            self.model.place(lane, jid)
        elif op == "claim":
            batch = await self.q.lanes.claim_many(WORKER, LEASE_MS, arg)
            self.promote()
            expected = [got[1] for _ in range(arg) if (got := self.model.claim())]
            assert [c.job_id for c in batch.claims] == expected
            for c in batch.claims:
                assert c.lane is not None
                self.held[c.job_id] = Held(c.lane, c.token)
        elif self.held:
            jid = sorted(self.held)[arg % len(self.held)]
            h = self.held.pop(jid)
            if op == "release":
                assert await self.q.jobs.release(jid, h.token)
                self.model.place(h.lane, jid)
            elif op == "retry_now":
                assert await self.q.jobs.fail(jid, h.token, "again", retry_in_ms=0) == "scheduled"
                score = await self.q.conn.zscore(self.q.keys.scheduled, jid)
                assert score is not None
                self.due.append((score, jid, h.lane))
            else:  # the lease runs out (its deadline moved into the past), then the reaper
                await self.q.conn.zadd(self.q.keys.active, {jid: 0}, xx=True)
                assert await self.q.stalled.reap() == [jid]
                self.promote()
                self.model.place(h.lane, jid)
        await self.check()

    def promote(self) -> None:
        """lane_claim and reap first promote due jobs, in (score, id) order, via place()."""
        for _, jid, lane in sorted(self.due):
            self.model.place(lane, jid)
        self.due.clear()

    async def check(self) -> None:
        k = self.q.keys
        new = [text(x) for x in await self.q.conn.lrange(k.new, 0, -1)]
        ring = [text(x) for x in await self.q.conn.lrange(k.ring, 0, -1)]
        owed = await self.q.conn.get(k.owed)
        order = self.model.order
        assert (new, ring, owed == b"1") == (order.new, order.ring, order.owed)
        for lane in LANES:
            waiting = [text(x) for x in await self.q.conn.zrange(k.lane(lane), 0, -1)]
            assert waiting == self.model.lanes.get(lane, [])
        Bounds.invariant(self.model)


async def _play(url: str, steps: list[Op]) -> None:
    conn = redis.asyncio.Redis.from_url(url, decode_responses=False)
    q = echomq.Queue(conn, f"fair{uuid.uuid4().hex[:12]}")
    try:
        run = Run(q)
        for op, arg in steps:
            await run.step(op, arg)
    finally:
        keys = [key async for key in conn.scan_iter(match=f"{q.keys.prefix}*")]
        if keys:
            await conn.unlink(*keys)
        await conn.aclose()


@pytest.mark.timeout(max(120, EXAMPLES * 2))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=ops)
@pytest.mark.slow
def test_the_real_scripts_claim_in_the_models_order(valkey_url: str, steps: list[Op]) -> None:
    asyncio.run(_play(valkey_url, steps))


async def test_a_batch_claims_in_the_order_of_single_claims(redis_conn: Any) -> None:
    """Prefetch leases several jobs in one call: they come out in exactly the order the same
    number of single claims would give, so a batch lets nothing jump the order."""
    orders = []
    for batch in (1, 4):
        q = echomq.Queue(redis_conn, f"fairb{uuid.uuid4().hex[:10]}")
        for i in range(12):
            await q.lanes.enqueue(f"m{i % 2}", i)  # two busy lanes
        got: list[int] = []
        for i in range(8):
            await q.lanes.enqueue(f"h{i}", 100 + i)  # a sparse lane arrives …
            for c in (await q.lanes.claim_many(WORKER, LEASE_MS, batch)).claims:
                got.append(c.payload)  # … and a batch (or a single claim) follows
            if batch == 1:
                for _ in range(3):
                    if c1 := await q.lanes.claim(WORKER, LEASE_MS):
                        got.append(c1.payload)
        while (rest := await q.lanes.claim_many(WORKER, LEASE_MS, batch)).claims:
            got.extend(c.payload for c in rest.claims)
        orders.append(got)
    assert orders[0] == orders[1] and sorted(orders[0]) == [*range(12), *range(100, 108)]


async def test_a_job_back_on_an_empty_lane_is_an_activation(redis_conn: Any) -> None:
    """Released, reaped and promoted jobs come back through place(): on an empty lane that
    is an activation (the lane joins ``new``); on a non-empty lane the lists do not move."""
    q = echomq.Queue(redis_conn, f"fairr{uuid.uuid4().hex[:10]}")
    k = q.keys
    for i in range(3):
        await q.lanes.enqueue("busy", i)
    await q.lanes.enqueue("sparse", "s")
    first = await q.lanes.claim(WORKER, LEASE_MS)  # busy: activated first
    second = await q.lanes.claim(WORKER, LEASE_MS)  # busy again: the ring is owed a turn
    third = await q.lanes.claim(WORKER, LEASE_MS)  # sparse, which empties and leaves
    assert first and second and third
    assert (first.lane, second.lane, third.lane) == ("busy", "busy", "sparse")
    assert await redis_conn.lrange(k.new, 0, -1) == []
    assert await redis_conn.lrange(k.ring, 0, -1) == [b"busy"]
    assert await q.jobs.release(third.job_id, third.token)
    assert await redis_conn.lrange(k.new, 0, -1) == [b"sparse"]
    assert await q.jobs.release(second.job_id, second.token)  # busy is non-empty: no move
    assert await redis_conn.lrange(k.new, 0, -1) == [b"sparse"]
    assert await redis_conn.lrange(k.ring, 0, -1) == [b"busy"]
    # The last claim served an activation, so the ring goes next (busy's oldest job: the
    # released one), then the returned sparse job, served as an activation.
    ring_turn = await q.lanes.claim(WORKER, LEASE_MS)
    activation = await q.lanes.claim(WORKER, LEASE_MS)
    assert ring_turn is not None and ring_turn.job_id == second.job_id
    assert activation is not None and activation.job_id == third.job_id


# -- the bounds, on the model, over long random runs -------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """How a long run's arrivals look: ``busy`` lanes refilled in bursts, a stream of sparse
    lanes (each a fresh name, one job), jobs coming back, and claims in batches."""

    seed: int
    busy: int
    burst: int
    sparse_per_step: float
    returns: float
    batch: int
    steps: int


patterns = st.builds(
    Pattern,
    seed=st.integers(0, 2**32 - 1),
    busy=st.integers(0, 40),
    burst=st.integers(1, 50),
    sparse_per_step=st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.5, 3.0]),
    returns=st.sampled_from([0.0, 0.05, 0.3]),
    batch=st.integers(1, 4),
    steps=st.just(2_000),
)


def run_model(p: Pattern) -> Bounds:
    """Play ``p`` on the model with the bounds checker on; it asserts at every claim."""
    rng = random.Random(p.seed)
    bounds = Bounds()
    lanes = FairLanes(bounds=bounds)
    n = 0
    held: list[tuple[str, str]] = []

    def job() -> str:
        nonlocal n
        n += 1
        return f"J{n:09d}"

    sparse = 0
    for _ in range(p.steps):
        if p.busy and rng.random() < 0.3:
            lane = f"busy{rng.randrange(p.busy)}"
            for _ in range(rng.randint(1, p.burst)):
                lanes.place(lane, job())
        arrivals = int(p.sparse_per_step) + (rng.random() < p.sparse_per_step % 1)
        for _ in range(arrivals):
            sparse += 1
            lanes.place(f"sparse{sparse}", job())
        if held and rng.random() < p.returns:
            lanes.place(*held.pop(rng.randrange(len(held))))
        for _ in range(rng.randint(1, p.batch)):
            if got := lanes.claim():
                held.append(got)
                del held[:-50]  # only the last few claims are still held
    return bounds


@settings(max_examples=max(30, EXAMPLES), deadline=None)
@given(p=patterns)
def test_both_bounds_hold_on_the_model_whatever_the_arrivals(p: Pattern) -> None:
    bounds = run_model(p)
    assert all(waited <= 2 * pos for waited, pos in bounds.ring_waits)
    assert all(waited <= 2 * pos for waited, pos in bounds.new_waits)


def test_both_bounds_are_reached() -> None:
    """The bounds are tight: with one sparse lane arriving per claim, a ring lane waits
    exactly 2p; an activation behind k others waits exactly 2(k + 1) when the ring is owed
    the next claim."""
    bounds = Bounds()
    lanes = FairLanes(bounds=bounds)
    for i in range(5):  # five busy lanes: once each has been claimed, all are in the ring
        for j in range(50):
            lanes.place(f"busy{i}", f"B{i}{j:03d}")
    while lanes.order.new:
        assert lanes.claim()
    assert sorted(lanes.order.ring) == [f"busy{i}" for i in range(5)]
    bounds.ring_waits.clear()
    for i in range(40):
        lanes.place(f"sparse{i}", f"S{i:03d}")
        assert lanes.claim()
    assert max(bounds.ring_waits) == (10, 5)  # p = 5, waited 2p = 10 claims
    assert (2, 1) in bounds.new_waits  # first in line, the ring owed a turn: 2 claims

    lanes = FairLanes(bounds=Bounds())
    for j in range(9):
        lanes.place("busy", f"B{j}")
    assert lanes.claim() and lanes.order.owed  # busy is in the ring, owed the next claim
    for i in range(4):
        lanes.place(f"s{i}", f"S{i}")
    for _ in range(8):
        assert lanes.claim()
    assert lanes.bounds and lanes.bounds.new_waits[-1] == (8, 4)  # k = 3 ahead: 2(k + 1)
