"""Scenarios 2–4: how fast a dead holder's job comes back, that a live one never loses it,
and that a frozen one is fenced off."""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio
from sqlalchemy import select

import echomq
from codemojex.config import Config
from codemojex.game import Game
from codemojex.store.models import ScoreRow
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.conftest import worker_env
from tests.chaos.harness import Figures, Pool, Zygote, wait_until

pytestmark = pytest.mark.chaos


# -- 2. re-claim latency ----------------------------------------------------------------------


async def _reclaim_trials(
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    trials: int,
    lapse_ms: int,
    reap_ms: int,
    lease_ms: int,
) -> dict[str, object]:
    """Per trial: A (a worker process) holds a job and is SIGKILLed at t0; B (a consumer in
    this process, hosting the reaper) must claim it by t0 + lapse + R + ε on the server
    clock, and not before A's heartbeat deadline passed."""
    conn = redis.asyncio.Redis.from_url(valkey.url)
    q = echomq.Queue(conn, f"reclaim{lapse_ms}")
    note = tmp_path / "a.log"
    pool = Pool(
        zygote,
        tmp_path / "a",
        role="consumer",
        prefix="A",
        args={
            "url": valkey.url,
            "queue": q.name,
            "note": str(note),
            "mode": "hang",
            "lease_ms": lease_ms,
            "lapse_ms": lapse_ms,
            "reap_interval_ms": reap_ms,
            "reaper": False,
        },
    )
    pools.append(pool)
    got: asyncio.Queue[tuple[str, int, int]] = asyncio.Queue()

    async def b_handler(claim: echomq.Claim) -> None:
        await got.put((claim.job_id, claim.token, claim.lease_until_ms - lease_ms))

    latencies: list[float] = []
    after_lapse: list[float] = []
    try:
        for trial in range(trials):
            a = pool.spawn()
            await wait_until(
                functools.partial(harness.registered, q, a.worker_id), 10, "A registered"
            )
            jid = await q.lanes.enqueue("l", {"trial": trial})
            await wait_until(functools.partial(_started, note, jid), 10, "A started the job")
            # B and its reaper start only now, so only A can have claimed the job.
            b = echomq.Consumer(
                q,
                b_handler,
                lease_ms=lease_ms,
                lapse_ms=lapse_ms,
                reap_interval_ms=reap_ms,
                worker_id=f"B{trial}",
            )
            b_task = asyncio.create_task(b.run())
            try:
                # Kill at a random phase of A's heartbeat and of B's reaper.
                await asyncio.sleep(random.uniform(0, lapse_ms / 1000))
                pool.kill(a)
                t0 = await q.server_time_ms()
                await zygote.wait_exit(a.pid, 5)
                beat = int(await conn.hget(q.keys.worker(a.worker_id), "beat") or 0)
                job, token, claimed_at = await asyncio.wait_for(got.get(), 30)
            finally:
                b.stop()
                await asyncio.wait_for(b_task, 15)
            assert job == jid and token == 2
            latency = claimed_at - t0
            latencies.append(latency)
            after_lapse.append(claimed_at - (beat + lapse_ms))
            assert latency <= lapse_ms + reap_ms + harness.EPSILON_MS, (trial, latency)
            # Never while A still heartbeat: only after its last beat's lapse had run out.
            assert claimed_at >= beat + lapse_ms, (trial, claimed_at, beat)
    finally:
        await conn.aclose()
    return {
        "trials": trials,
        "lapse_ms": lapse_ms,
        "reap_ms": reap_ms,
        "bound_ms": lapse_ms + reap_ms + harness.EPSILON_MS,
        "latency_ms": harness.summary(latencies),
        "margin_after_lapse_ms": harness.summary(after_lapse),
    }


async def _started(note: Path, job_id: str) -> bool:
    return note.exists() and f"start {job_id} " in note.read_text()


@pytest.mark.timeout(harness.size(120, 600))
async def test_killed_holder_job_is_reclaimed_within_lapse_plus_reap(
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    fig = await _reclaim_trials(
        valkey,
        zygote,
        tmp_path,
        pools,
        harness.size(10, 50),
        harness.LAPSE_MS,
        harness.REAP_MS,
        harness.LEASE_MS,
    )
    figures.record("2 re-claim latency (short timings)", **fig)


@pytest.mark.timeout(harness.size(120, 600))
async def test_reclaim_latency_at_default_timings(
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    """The contract's defaults: lapse 3 s, reap every 1 s, lease 10 s."""
    fig = await _reclaim_trials(
        valkey, zygote, tmp_path, pools, harness.size(3, 10), 3_000, 1_000, 10_000
    )
    figures.record("2 re-claim latency (default timings)", **fig)


# -- 3. no false reclaim ----------------------------------------------------------------------


async def test_live_worker_keeps_its_job_for_five_leases(
    game: Game,
    config: Config,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    hold_ms = 5 * config.lease_ms
    players = await harness.new_players(game, 4)
    rnd, _ = await game.current_round()
    accepted = [await game.submit(p, rnd.round_id, list(rnd.secret)) for p in players]
    ids = [a.job_id for a in accepted]
    pool = Pool(
        zygote, tmp_path / "w", env=worker_env(config, CODEMOJEX_SCORE_DELAY_MS=str(hold_ms))
    )
    pools.append(pool)
    holder = pool.spawn()
    await wait_until(lambda: _all_active(game, ids), 15, "the holder claimed every job")
    second = pool.spawn()  # a second worker, hungry, with its own reaper
    await wait_until(lambda: harness.registered(game, second.worker_id), 10, "second worker")

    tokens: set[int] = set()
    holders: set[str] = set()
    sweeps = 0
    t0 = time.monotonic()
    while not await _all_completed(game, ids):
        assert time.monotonic() - t0 < hold_ms / 1000 + 20, "jobs not completed"
        await game.queue.stalled.reap()  # a third reaper, in this process, all along
        sweeps += 1
        for jid in ids:
            info = await game.queue.jobs.get(jid)
            assert info is not None
            tokens.add(info.attempts)
            if info.worker_id:
                holders.add(info.worker_id)
        await asyncio.sleep(0.1)
    held_s = time.monotonic() - t0
    stats = await game.queue.stats()
    verdict = await harness.verdict(
        game,
        [
            harness.Guess(a.job_id, p, rnd.round_id, a.seq, rnd.secret)
            for a, p in zip(accepted, players, strict=True)
        ],
    )
    figures.record(
        "3 no false reclaim",
        jobs=len(ids),
        held_s=round(held_s, 1),
        lease_ms=config.lease_ms,
        tokens_seen=sorted(tokens),
        deliveries=stats["counters"].get("claimed", 0),
        reclaims=stats["counters"].get("reaped", 0),
        refused=sum(stats["refused"].values()),
        test_reaper_sweeps=sweeps,
    )
    assert tokens == {1} and holders == {holder.worker_id}
    assert stats["counters"].get("claimed") == len(ids)
    assert stats["counters"].get("reaped", 0) == 0 and stats["refused"] == {}
    assert stats["counters"].get("lapsed_workers", 0) == 0
    assert held_s * 1000 >= hold_ms - 500
    assert verdict["lost"] == verdict["doubled"] == verdict["wrong_totals"] == 0


async def _all_active(game: Game, ids: list[str]) -> bool:
    infos = [await game.queue.jobs.get(j) for j in ids]
    return all(i is not None and i.state == "active" for i in infos)


async def _all_completed(game: Game, ids: list[str]) -> bool:
    infos = [await game.queue.jobs.get(j) for j in ids]
    return all(i is not None and i.state == "completed" for i in infos)


# -- 4. frozen holder -------------------------------------------------------------------------


def _is_stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


@pytest.mark.parametrize("freeze_at", ["after_claim", "after_commit"])
async def test_frozen_holder_is_fenced(
    game: Game,
    config: Config,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
    freeze_at: str,
) -> None:
    """A freezes itself (SIGSTOP, through the crash-point switch) right after its claim —
    or right after its SQL commit, so its write lands first; B reclaims and completes;
    A is SIGCONTed. A's attempt counts nothing and there is one SQL effect."""
    (player,) = await harness.new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    # After a claim-time freeze, A's score takes 3 s: its next extend (every lease/3)
    # comes first, reports the lease lost and cancels it.
    delay = "3000" if freeze_at == "after_claim" else "0"
    a_pool = Pool(
        zygote,
        tmp_path / "a",
        env=worker_env(
            config,
            CODEMOJEX_TEST_CRASH=f"{freeze_at}:1.0:stop",
            CODEMOJEX_SCORE_DELAY_MS=delay,
            CODEMOJEX_CONCURRENCY="1",
        ),
    )
    b_pool = Pool(zygote, tmp_path / "b", env=worker_env(config))
    pools += [a_pool, b_pool]
    a = a_pool.spawn()
    await wait_until(lambda: _stopped(a.pid), 15, "A froze")
    frozen_at = time.monotonic()
    b = b_pool.spawn()

    async def done() -> bool:
        info = await game.queue.jobs.get(acc.job_id)
        return info is not None and info.state == "completed"

    await wait_until(done, 20, "B completed the job")
    b_done_s = time.monotonic() - frozen_at
    # Keep A frozen past its whole lease, then thaw it.
    await asyncio.sleep(max(0.0, config.lease_ms / 1000 + 0.2 - b_done_s))
    before = (await game.queue.stats())["refused"]
    os.kill(a.pid, signal.SIGCONT)

    async def refused() -> bool:
        now = (await game.queue.stats())["refused"]
        return bool(sum(now.values()) > sum(before.values()))

    await wait_until(refused, 10, "A's late call refused")
    await asyncio.sleep(0.5)
    await a_pool.stop_all()
    await b_pool.stop_all()
    a_log = a.log.read_text()
    stats = await game.queue.stats()
    info = await game.queue.jobs.get(acc.job_id)
    async with game.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(ScoreRow.worker_id, ScoreRow.attempts).where(ScoreRow.job_id == acc.job_id)
            )
        ).all()
    board = await harness.standings(game)
    cancelled = "handler cancelled" in a_log
    figures.record(
        f"4 frozen holder fenced ({freeze_at})",
        frozen_s=round(time.monotonic() - frozen_at, 1),
        b_completed_after_s=round(b_done_s, 2),
        refused=stats["refused"],
        a_handler_cancelled=cancelled,
        sql_rows=len(rows),
        sql_written_by="A" if rows and rows[0][0] == a.worker_id else "B",
        completed=stats["counters"].get("completed"),
        failures=info.failures if info else None,
        error=info.error if info else None,
    )
    assert info is not None and info.state == "completed" and info.attempts == 2
    assert info.result["worker_id"] == b.worker_id
    assert stats["counters"].get("completed") == 1
    assert len(rows) == 1 and board == {player: (110, 1)}
    if freeze_at == "after_claim":
        # A's handler never reached SQL: its next extend said "lost" and cancelled it.
        assert rows[0] == (b.worker_id, 2)
        assert cancelled and stats["refused"].get("extend", 0) >= 1
        assert stats["refused"].get("complete", 0) == 0
    else:
        # A's SQL write landed first; B's was the no-op; A's completion was refused.
        assert rows[0] == (a.worker_id, 1)
        assert stats["refused"].get("complete", 0) + stats["refused"].get("extend", 0) >= 1


async def _stopped(pid: int) -> bool:
    return _is_stopped(pid)
