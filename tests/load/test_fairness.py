"""Fairness asserts order, not time. The lanes' fair order (sparse lanes first, then
round-robin; ``docs/load.md``, "Fair order: sparse lanes first") has two bounds, in claims,
and these tests check both on the real scripts while mashers flood their lanes:

* an activation (a job arriving on an empty lane) with k activations ahead of it in ``new``
  is claimed within 2(k + 1) claims;
* a lane that stays non-empty, back in the ring at position p (p <= the non-empty lanes),
  is claimed again within 2p claims, however many sparse lanes arrive meanwhile.

An honest player has one guess outstanding at a time (it waits for the score before the
next), so each of its guesses is an activation; a consumer claims one job at a time, as a
busy worker does, and each claim is counted. Plain FIFO, the contrast, fails by the whole
backlog, which shows the count measures what it claims to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import pytest
import redis.asyncio

import echomq
from codemojex.config import GUESS_QUEUE
from harness.running import Up

MASHER_LANES = 10
FLOOD_PER_LANE = 1_000
HONEST_LANES = 3
CLAIMS = 600
HONEST_EVERY = 7  # claims between an honest player's score and its next guess
LEASE_MS = 60_000
WORKER = "WRK_fairness"


@dataclass
class Waits:
    """Claims waited, each with the position its bound is stated in: for an honest job, q
    (its place in ``new`` at arrival, k + 1); for a masher lane, p (its place in the ring
    after its previous claim)."""

    honest: list[tuple[int, int]] = field(default_factory=list)  # (claims waited, q)
    masher: list[tuple[int, int]] = field(default_factory=list)  # (claims waited, p)
    masher_lanes: set[str] = field(default_factory=set)

    def over_bound(self) -> list[tuple[str, int, int]]:
        return [
            (kind, waited, pos)
            for kind, waits in (("honest", self.honest), ("masher", self.masher))
            for waited, pos in waits
            if waited > 2 * pos
        ]


async def _flood(enqueue: Callable[[int], Awaitable[object]], n: int, at_once: int = 32) -> None:
    """``enqueue(0 … n-1)``, ``at_once`` at a time (one connection pool: stay under its cap)."""
    for first in range(0, n, at_once):
        await asyncio.gather(*(enqueue(i) for i in range(first, min(n, first + at_once))))


async def _play(
    q: echomq.Queue,
    submit: Callable[[int], Awaitable[str]],
    claims: int = CLAIMS,
    sparse: Callable[[int], Awaitable[object]] | None = None,
) -> Waits:
    """Claim ``claims`` jobs one at a time. Each honest player submits a guess once the
    masher lanes have had their first job (their activations) and are all in the ring, and
    its next one HONEST_EVERY claims after this one was claimed (its think time).
    ``sparse(n)``, when given, runs before claim n (more one-job lanes arriving)."""
    w = Waits()
    start = 2 * MASHER_LANES  # by then every masher lane has been claimed at least once
    due = dict.fromkeys(range(HONEST_LANES), start)  # player -> claim count of its guess
    pending: dict[str, tuple[int, int, int]] = {}  # job -> (player, claims then, q)
    in_ring: dict[str, tuple[int, int]] = {}  # lane -> (claims then, p)
    for n in range(claims):
        if sparse is not None:
            await sparse(n)
        for player in [p for p, at in due.items() if n >= at]:
            job_id = await submit(player)
            # Its lane was empty: it is the last of ``new`` (nothing else arrives meanwhile).
            pending[job_id] = (player, n, int(await q.conn.llen(q.keys.new)))
            del due[player]
        c = await q.lanes.claim(WORKER, LEASE_MS)
        assert c is not None, "the flood ran dry"
        await q.jobs.complete(c.job_id, c.token)
        if c.job_id in pending:
            player, at, pos = pending.pop(c.job_id)
            w.honest.append((n + 1 - at, pos))
            due[player] = n + 1 + HONEST_EVERY
        assert c.lane is not None
        if c.lane in in_ring:
            at, pos = in_ring.pop(c.lane)
            w.masher.append((n + 1 - at, pos))
        # A lane that kept jobs is back at the ring's tail (it can be in no other place):
        # a masher's. An honest or sparse lane has just been emptied.
        ring = await q.conn.lrange(q.keys.ring, 0, -1)
        if ring and ring[-1].decode() == c.lane:
            in_ring[c.lane] = (n + 1, len(ring))
            w.masher_lanes.add(c.lane)
    return w


@pytest.mark.slow
async def test_honest_jobs_jump_the_mashers_and_the_mashers_still_get_their_turn(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    q = echomq.Queue(redis_conn, queue_name)
    await _flood(
        lambda i: q.lanes.enqueue(f"masher-{i % MASHER_LANES}", {"i": i}),
        MASHER_LANES * FLOOD_PER_LANE,
    )

    async def submit(player: int) -> str:
        return await q.lanes.enqueue(f"honest-{player}", {"player": player})

    w = await _play(q, submit)
    assert len(w.honest) >= 100 and len(w.masher) >= 300
    assert not w.over_bound(), w.over_bound()
    # Sparse first: an honest guess never waits for the ten masher lanes, at most for the
    # other honest players' guesses (2 claims each), where round-robin made it wait ~11.
    assert max(waited for waited, _ in w.honest) <= 2 * HONEST_LANES < MASHER_LANES
    # The mashers alone stay in the ring, served round-robin between the activations.
    assert len(w.masher_lanes) == MASHER_LANES
    assert max(pos for _, pos in w.masher) == MASHER_LANES


async def test_a_flood_of_sparse_lanes_cannot_starve_the_ring(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    """Two new one-job lanes arrive before every claim, twice what the claims can serve: with
    new-flows-first alone the masher lanes would never be claimed again. Each still is,
    within 2p claims (here exactly 2p: the bound is reached), and every activation within
    2(k + 1) even as ``new`` grows."""
    q = echomq.Queue(redis_conn, queue_name)
    await _flood(lambda i: q.lanes.enqueue(f"masher-{i % 5}", {"i": i}), 5 * 200)

    async def submit(player: int) -> str:
        return await q.lanes.enqueue(f"honest-{player}", {"player": player})

    async def sparse(n: int) -> None:
        await q.lanes.enqueue(f"sparse-{n}-a", {"n": n})
        await q.lanes.enqueue(f"sparse-{n}-b", {"n": n})

    w = await _play(q, submit, claims=300, sparse=sparse)
    assert not w.over_bound(), w.over_bound()
    assert len(w.masher) >= 100 and len(w.masher_lanes) == 5
    assert (2 * 5, 5) in w.masher  # p = 5 masher lanes, waited exactly 2p
    assert await q.conn.llen(q.keys.new) >= 250  # the sparse lanes did pile up


async def test_one_fifo_lane_breaks_the_bound(
    redis_conn: redis.asyncio.Redis, queue_name: str
) -> None:
    """The contrast (what ``up --fifo`` does: every guess on one lane): an honest job is no
    activation, it waits behind the whole flood, far past any bound in lanes."""
    q = echomq.Queue(redis_conn, queue_name)
    await _flood(lambda i: q.lanes.enqueue("fifo", {"i": i}), 300)
    honest = await q.lanes.enqueue("fifo", {"honest": True})
    claims = 0
    while (c := await q.lanes.claim(WORKER, LEASE_MS)) is not None:
        claims += 1
        if c.job_id == honest:
            break
    assert claims == 301  # as an activation it would have waited at most 2


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_through_the_game_honest_guesses_jump_the_mashers(
    start_up: Callable[..., Up],
) -> None:
    """The real path: guesses POSTed to ``codemojex up`` (no workers; the test is the
    worker), each player on its own lane, claimed from the game's queue. The door is off
    (``--door-in-flight 0``): what is under test is the order the lanes serve a backlog in,
    so every masher guess must reach its lane; the door, which would shed these mashers
    from one address once the machine is loaded, has its own tests (tests/web/test_door*.py)."""
    up = start_up(
        "--workers", "0", "--lane-cap", "1000", "--guess-rate", "0", "--door-in-flight", "0"
    )
    async with httpx.AsyncClient(base_url=up.base, trust_env=False, timeout=10) as http:
        round_id = (await http.get("/api/round")).json()["round_id"]

        async def player(name: str) -> dict[str, str]:
            token = (await http.post("/api/players", json={"name": name})).json()["token"]
            return {"Authorization": f"Bearer {token}"}

        mashers = [await player(f"masher {m}") for m in range(MASHER_LANES)]
        honest = [await player(f"honest {h}") for h in range(HONEST_LANES)]
        guess = {"round_id": round_id, "guess": ["🍎", "🍌", "🍇", "🍒"]}

        async def mash(headers: dict[str, str]) -> None:
            for _ in range(100):
                assert (
                    await http.post("/api/guesses", json=guess, headers=headers)
                ).status_code == 202

        await asyncio.gather(*(mash(h) for h in mashers))
        conn = redis.asyncio.Redis.from_url(up.valkey_url)
        try:
            q = echomq.Queue(conn, GUESS_QUEUE)

            async def submit(p: int) -> str:
                resp = await http.post("/api/guesses", json=guess, headers=honest[p])
                assert resp.status_code == 202, resp.text
                return str(resp.json()["job_id"])

            w = await _play(q, submit, claims=400)
        finally:
            await conn.aclose()
    assert len(w.honest) >= 50 and len(w.masher) >= 200
    assert len(w.masher_lanes) == MASHER_LANES
    assert not w.over_bound(), w.over_bound()
    assert max(waited for waited, _ in w.honest) <= 2 * HONEST_LANES < MASHER_LANES
