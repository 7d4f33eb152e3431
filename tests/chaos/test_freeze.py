"""A frozen Valkey (SIGSTOP/SIGCONT on valkey-server) never costs a live worker its jobs
(issue 21, item 2), and a worker that really died during or around a freeze still has its
jobs back within a lapse and a few seconds of the server answering again.

Production timings (lease 10 s, lapse 3 s, reap interval 1 s, a beat every second), worker
processes with the game's client settings (socket timeout 5 s, redis-py's retry backoff),
handlers that never return: every job stays held by a live worker all along, so any reap
of one is a false reclaim. Before the fix, a freeze just past the lapse (about 4-5 s)
reaped all of them: the threshold of the outage detection (a gap in the reaper's sweeps
longer than lapse + reap interval, or the lock's time + reap interval) sat above the
moment a deadline could first pass (lapse - heartbeat).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

import echomq
from codemojex.game import Game
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.conftest import make_config, worker_env
from tests.chaos.harness import Figures, Pool, Zygote, wait_until

pytestmark = pytest.mark.chaos

LEASE_MS, LAPSE_MS, REAP_MS = 10_000, 3_000, 1_000
# Full size: 1-6 s in 0.5 s steps, then long ones (about 2.5 min per sweep). By default the
# freezes around the lapse, where the reaper's queued call once reclaimed live jobs (2.5-4 s),
# and one long one; CODEMOJEX_FREEZES="4,4.5" picks others.
FREEZES = (
    [x / 2 for x in range(2, 13)] + [10.0, 20.0, 30.0]
    if harness.FULL
    else [2.5, 3.0, 3.5, 4.0, 10.0]
)
# The game's workers sweep a subset by default (one each side of the lapse's edge, and the
# long one): the sweep of EchoMQ's own workers above covers every step around the lapse.
GAME_FREEZES = FREEZES if harness.FULL else [3.0, 4.0, 10.0]
if os.environ.get("CODEMOJEX_FREEZES"):
    FREEZES = GAME_FREEZES = [float(x) for x in os.environ["CODEMOJEX_FREEZES"].split(",")]
SETTLE_S = (LAPSE_MS + REAP_MS) / 1000 + 0.3  # a false reap shows within this


def _pool(zygote: Zygote, tmp: Path, q: echomq.Queue, url: str, name: str, **args: object) -> Pool:
    return Pool(
        zygote,
        tmp / name,
        role="consumer",
        prefix=name,
        args={
            "url": url,
            "queue": q.name,
            "note": str(tmp / f"{name}.notes"),
            "mode": "hang",
            "lease_ms": LEASE_MS,
            "lapse_ms": LAPSE_MS,
            "reap_interval_ms": REAP_MS,
            **args,
        },
    )


def _starts(note: Path) -> list[tuple[str, int]]:
    if not note.exists():
        return []
    out = []
    for line in note.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["start"]:
            out.append((parts[1], int(parts[2])))
    return out


async def _count(note: Path, n: int) -> bool:
    return len(_starts(note)) >= n


async def _counter(q: echomq.Queue, name: str) -> int:
    return int((await q.stats())["counters"].get(name, 0))


async def _freeze(valkey: EmbeddedValkey, seconds: float) -> float:
    """Valkey stopped for ``seconds``; returns the wall clock (ms) of its resumption."""
    assert valkey.pid is not None
    os.kill(valkey.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        os.kill(valkey.pid, signal.SIGCONT)
    return time.time() * 1000


class LateWorker:
    """A live worker in this process whose beat lands ``late_s`` after Valkey resumes,
    behind the reaper's queued call (as a worker whose beat waits for a pooled
    connection, or for its retry backoff): it beats every 0.9 s and renews its leases,
    except while ``gate`` is shut."""

    def __init__(self, q: echomq.Queue, late_s: float) -> None:
        self.q, self.late_s, self.jobs = q, late_s, list[str]()
        self.gate = asyncio.Event()
        self.gate.set()
        # The gap as the consumers compute it (the same call before the fix took none).
        self.kw: dict[str, Any] = {}
        if "gap_ms" in inspect.signature(q.beat).parameters:
            from echomq.stalled import pulse_gap_ms

            self.kw = {"gap_ms": pulse_gap_ms(LAPSE_MS, 1_000, REAP_MS)}

    async def start(self, n: int) -> None:
        await self.q.beat("late", LAPSE_MS, **self.kw)
        for i in range(n):
            await self.q.lanes.enqueue(f"late{i}", {"late": i})
            claim = await self.q.lanes.claim("late", LEASE_MS)
            assert claim is not None
            self.jobs.append(claim.job_id)

    async def run(self) -> None:
        while True:
            await self.gate.wait()
            await self.q.beat("late", LAPSE_MS, **self.kw)
            for j in self.jobs:
                await self.q.jobs.extend(j, 1, LEASE_MS)
            await asyncio.sleep(0.9)

    async def reopen(self) -> None:
        await asyncio.sleep(self.late_s)
        self.gate.set()


async def _sweep_freezes(
    valkey: EmbeddedValkey,
    q: echomq.Queue,
    deliveries: Callable[[], Awaitable[int] | int],
    late: LateWorker | None = None,
    freezes: list[float] = FREEZES,
) -> list[dict[str, object]]:
    """Every freeze of ``freezes`` in turn, at a random phase, each followed by a lapse and a
    reap interval (a false reclaim, at once or after a grace, shows within it)."""
    rows: list[dict[str, object]] = []
    for d in freezes:
        await asyncio.sleep(random.uniform(0, 1))  # any phase of beats and sweeps
        before = await _counter(q, "outages")
        if late is not None:
            late.gate.clear()
        await _freeze(valkey, d)
        if late is not None:
            asyncio.create_task(late.reopen())
        await asyncio.sleep(SETTLE_S)
        n = deliveries()
        rows.append(
            {
                "freeze_s": d,
                "outage_seen": await _counter(q, "outages") - before,
                "reaped_so_far": await _counter(q, "reaped"),
                "deliveries": n if isinstance(n, int) else await n,
            }
        )
    return rows


@pytest.mark.timeout(300)  # full size: 14 freezes, 98.5 s frozen in all, about 2.5 min
async def test_no_freeze_of_the_sweep_reclaims_a_live_workers_job(
    valkey: EmbeddedValkey, zygote: Zygote, tmp_path: Path, pools: list[Pool], figures: Figures
) -> None:
    """Two worker processes hold 12 jobs, and a worker in this process whose beat lands
    0.4 s after each resumption holds 2 more (before the fix, its jobs were reaped by the
    reaper's call queued during a freeze of about 2.5-4 s)."""
    conn = redis.asyncio.Redis.from_url(valkey.url)
    q = echomq.Queue(conn, "frozen")
    pool = _pool(zygote, tmp_path, q, valkey.url, "L", concurrency=6)
    pools.append(pool)
    note = tmp_path / "L.notes"
    try:
        workers = [pool.spawn(), pool.spawn()]
        for w in workers:
            await wait_until(functools.partial(harness.registered, q, w.worker_id), 10, "up")
        jobs = [await q.lanes.enqueue(f"l{i}", {"i": i}) for i in range(12)]
        await wait_until(functools.partial(_count, note, 12), 20, "12 jobs held")
        late = LateWorker(q, 0.4)
        await late.start(2)
        beats = asyncio.create_task(late.run())
        rows = await _sweep_freezes(valkey, q, lambda: len(_starts(note)), late)
        assert pool.live() == workers  # neither process died
        infos = [await q.jobs.get(j) for j in jobs + late.jobs]
    finally:
        if "beats" in locals():
            beats.cancel()
        await pool.stop_all()
        await conn.aclose()
    figures.record(
        "issue 21 Valkey freeze sweep",
        freezes_s=FREEZES,
        outages_seen=[r["outage_seen"] for r in rows],
        reaped=rows[-1]["reaped_so_far"] if rows else None,
        deliveries=len(_starts(note)),
    )
    bad = [r for r in rows if r["reaped_so_far"] or r["deliveries"] != 12]
    assert not bad, f"live jobs reclaimed after a freeze: {bad}"
    for info in infos:
        assert info is not None and info.state == "active", info
        assert info.attempts == 1 and info.stalls == 0, info


@pytest.mark.timeout(300)
async def test_no_freeze_of_the_sweep_reclaims_a_guess_being_scored(
    valkey: EmbeddedValkey,
    sql_url: str,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    """The issue's own setup: the game's score workers (`up`'s timings, its client: a
    blocking pool shared by the claims, the park, the leases and the beats, so a beat can
    land well after Valkey resumes), 12 guesses held by 2 workers whose scoring outlasts
    the whole sweep."""
    config = make_config(
        valkey.url,
        sql_url,
        tmp_path,
        lease_ms=LEASE_MS,
        lapse_ms=LAPSE_MS,
        reap_interval_ms=REAP_MS,
    )
    env = worker_env(
        config,
        CODEMOJEX_SCORE_DELAY_MS="600000",
        CODEMOJEX_SCORE_TIMEOUT_MS="0",
        CODEMOJEX_CONCURRENCY="6",
    )
    pool = Pool(zygote, tmp_path / "w", env=env)
    pools.append(pool)
    game = Game.connect(config)
    q = game.queue
    try:
        workers = [pool.spawn(), pool.spawn()]
        for w in workers:
            await wait_until(functools.partial(harness.registered, q, w.worker_id), 20, "up")
        players = await harness.new_players(game, 12)
        accepted = await harness.submit_many(game, players, 12, random.Random(21))
        jobs = [g.job_id for g in accepted]

        async def attempts() -> int:
            return sum([(i.attempts if i else 0) for i in [await q.jobs.get(j) for j in jobs]])

        async def held() -> bool:
            return await attempts() == 12 and (await q.stats())["active"] == 12

        await wait_until(held, 20, "12 guesses held")
        rows = await _sweep_freezes(valkey, q, attempts, freezes=GAME_FREEZES)
        assert pool.live() == workers
        infos = [await q.jobs.get(j) for j in jobs]
    finally:
        await pool.stop_all()
        await game.close()
    figures.record(
        "issue 21 Valkey freeze sweep, score workers",
        freezes_s=GAME_FREEZES,
        outages_seen=[r["outage_seen"] for r in rows],
        reaped=rows[-1]["reaped_so_far"] if rows else None,
    )
    bad = [r for r in rows if r["reaped_so_far"] or r["deliveries"] != 12]
    assert not bad, f"live jobs reclaimed after a freeze: {bad}"
    for info in infos:
        assert info is not None and info.state == "active", info
        assert info.attempts == 1 and info.stalls == 0, info


async def test_a_worker_killed_around_a_freeze_is_still_reaped_in_a_lapse(
    valkey: EmbeddedValkey, zygote: Zygote, tmp_path: Path, pools: list[Pool], figures: Figures
) -> None:
    """Live workers hold every slot they have; a victim (no reaper) holds two more jobs
    and is SIGKILLed mid-freeze, just before a freeze, or just after one. Its jobs come
    back within lapse + reap interval + 1.5 s of the later of its death and the server's
    resumption, and nobody else's job is touched."""
    conn = redis.asyncio.Redis.from_url(valkey.url)
    q = echomq.Queue(conn, "victim")
    live = _pool(zygote, tmp_path, q, valkey.url, "L", concurrency=4)
    victims = _pool(zygote, tmp_path, q, valkey.url, "V", concurrency=2, reaper=False)
    pools += [live, victims]
    vnote = tmp_path / "V.notes"
    delays: list[dict[str, object]] = []
    try:
        for _ in range(2):
            w = live.spawn()
            await wait_until(functools.partial(harness.registered, q, w.worker_id), 10, "up")
        held = [await q.lanes.enqueue(f"l{i}", {"i": i}) for i in range(8)]
        await wait_until(functools.partial(_count, tmp_path / "L.notes", 8), 20, "8 held")
        victim_jobs = [await q.lanes.enqueue(f"v{i}", {"v": i}) for i in range(2)]
        for n, (case, freeze_s) in enumerate(
            (("killed mid-freeze", 5.0), ("killed 0.5 s before", 4.0), ("killed after", 4.0))
        ):
            v = victims.spawn()
            await wait_until(functools.partial(_count, vnote, 2 * (n + 1)), 20, "victim holds")
            await asyncio.sleep(1.2)  # a beat or so
            reaped_before = await _counter(q, "reaped")
            assert valkey.pid is not None
            if case == "killed 0.5 s before":
                victims.kill(v)
                killed = time.time() * 1000
                await asyncio.sleep(0.5)
                resumed = await _freeze(valkey, freeze_s)
            elif case == "killed mid-freeze":
                os.kill(valkey.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(freeze_s / 2)
                    victims.kill(v)
                    killed = time.time() * 1000
                    await asyncio.sleep(freeze_s / 2)
                finally:
                    os.kill(valkey.pid, signal.SIGCONT)
                resumed = time.time() * 1000
            else:
                resumed = await _freeze(valkey, freeze_s)
                await asyncio.sleep(0.3)
                victims.kill(v)
                killed = time.time() * 1000

            async def both_reaped(base: int = reaped_before) -> bool:
                return await _counter(q, "reaped") >= base + 2

            await wait_until(both_reaped, 20, f"{case}: the victim's jobs reaped")
            events: Any = await conn.xrevrange(q.keys.events, count=50)
            at = max(
                int(eid.decode().split("-")[0])
                for eid, f in events
                if f.get(b"type") == b"reaped" and f.get(b"job_id", b"").decode() in victim_jobs
            )
            start = max(killed, resumed)
            delays.append(
                {"case": case, "freeze_s": freeze_s, "reaped_after_ms": round(at - start)}
            )
            assert at - start <= LAPSE_MS + REAP_MS + 1_500, delays[-1]
        infos = [await q.jobs.get(j) for j in held]
    finally:
        await live.stop_all()
        await victims.stop_all()
        await conn.aclose()
    figures.record("issue 21 dead worker around a freeze", cases=delays)
    for info in infos:  # the live workers' jobs: never reclaimed
        assert info is not None and info.state == "active" and info.stalls == 0, info
