"""Fairness asserts order, not time: with mashers flooding their lanes, each honest guess is
claimed within (number of non-empty lanes at its acceptance + 1) claims.

An honest player has one guess outstanding at a time (it waits for the score before the
next), so its lane holds at most that one job; a consumer claims one job at a time, as a
busy worker does, and each claim is counted. Plain FIFO, the contrast, fails the bound by
the whole backlog — which shows the count measures what it claims to.
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
from tests.cli.running import Up

MASHER_LANES = 5
FLOOD_PER_LANE = 2_000
HONEST_LANES = 3
CLAIMS = 600
HONEST_EVERY = 7  # claims between an honest player's score and its next guess
LEASE_MS = 60_000
WORKER = "WRK_fairness"


@dataclass
class Waits:
    """For each honest job: the claims it waited, and the non-empty lanes at its acceptance."""

    waits: list[tuple[int, int]] = field(default_factory=list)

    def over_bound(self) -> list[tuple[int, int]]:
        return [(waited, lanes) for waited, lanes in self.waits if waited > lanes + 1]


async def _flood(enqueue: Callable[[int], Awaitable[object]], n: int, at_once: int = 32) -> None:
    """``enqueue(0 … n-1)``, ``at_once`` at a time (one connection pool: stay under its cap)."""
    for first in range(0, n, at_once):
        await asyncio.gather(*(enqueue(i) for i in range(first, min(n, first + at_once))))


async def _nonempty_lanes(q: echomq.Queue) -> int:
    return sum(1 for depth in (await q.stats())["lanes"].values() if depth)


async def _play(q: echomq.Queue, submit: Callable[[int], Awaitable[str]],
                claims: int = CLAIMS) -> Waits:
    """Claim ``claims`` jobs one at a time. Each honest player submits a guess, and its next
    one HONEST_EVERY claims after this one was claimed (its think time)."""
    w = Waits()
    due = dict.fromkeys(range(HONEST_LANES), 0)  # player -> claim count at which it guesses
    pending: dict[str, tuple[int, int, int]] = {}  # job -> (player, claims then, lanes then)
    for n in range(claims):
        for player in [p for p, at in due.items() if n >= at]:
            job_id = await submit(player)
            pending[job_id] = (player, n, await _nonempty_lanes(q))
            del due[player]
        c = await q.lanes.claim(WORKER, LEASE_MS)
        assert c is not None, "the flood ran dry"
        await q.jobs.complete(c.job_id, c.token)
        if c.job_id in pending:
            player, at, lanes = pending.pop(c.job_id)
            w.waits.append((n + 1 - at, lanes))
            due[player] = n + 1 + HONEST_EVERY
    return w


async def test_honest_jobs_are_claimed_within_the_lanes_ahead_of_them(
        redis_conn: redis.asyncio.Redis, queue_name: str) -> None:
    q = echomq.Queue(redis_conn, queue_name)
    await _flood(lambda i: q.lanes.enqueue(f"masher-{i % MASHER_LANES}", {"i": i}),
                 MASHER_LANES * FLOOD_PER_LANE)

    async def submit(player: int) -> str:
        return await q.lanes.enqueue(f"honest-{player}", {"player": player})

    w = await _play(q, submit)
    assert len(w.waits) >= 100
    assert not w.over_bound(), w.over_bound()
    # The flood was on: an honest job did wait for the mashers' lanes, just never longer.
    assert max(waited for waited, _ in w.waits) >= MASHER_LANES


async def test_one_fifo_lane_breaks_the_bound(redis_conn: redis.asyncio.Redis,
                                              queue_name: str) -> None:
    """The contrast (what ``up --fifo`` does: every guess on one lane): an honest job waits
    behind the whole flood, far past the bound of 1 non-empty lane + 1."""
    q = echomq.Queue(redis_conn, queue_name)
    await _flood(lambda i: q.lanes.enqueue("fifo", {"i": i}), 300)
    honest = await q.lanes.enqueue("fifo", {"honest": True})
    claims = 0
    while (c := await q.lanes.claim(WORKER, LEASE_MS)) is not None:
        claims += 1
        if c.job_id == honest:
            break
    assert claims == 301 > await _nonempty_lanes(q) + 1 + 1


@pytest.mark.timeout(60)
async def test_through_the_game_honest_guesses_jump_the_mashers(
        start_up: Callable[..., Up]) -> None:
    """The real path: guesses POSTed to ``codemojex up`` (no workers; the test is the
    worker), each player on its own lane, claimed from the game's queue."""
    up = start_up("--workers", "0", "--lane-cap", "1000")
    async with httpx.AsyncClient(base_url=up.base, trust_env=False, timeout=10) as http:
        round_id = (await http.get("/api/round")).json()["round_id"]

        async def player(name: str) -> dict[str, str]:
            token = (await http.post("/api/players", json={"name": name})).json()["token"]
            return {"Authorization": f"Bearer {token}"}

        mashers = [await player(f"masher {m}") for m in range(MASHER_LANES)]
        honest = [await player(f"honest {h}") for h in range(HONEST_LANES)]
        guess = {"round_id": round_id, "guess": ["🍎", "🍌", "🍇", "🍒"]}

        async def mash(headers: dict[str, str]) -> None:
            for _ in range(150):
                assert (await http.post("/api/guesses", json=guess,
                                        headers=headers)).status_code == 202

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
    assert len(w.waits) >= 50 and not w.over_bound(), w.over_bound()
    assert max(waited for waited, _ in w.waits) >= MASHER_LANES
