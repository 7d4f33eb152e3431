"""The game's periodic sweep (a current round, dead jobs on the durable floor) runs on one
EchoMQ schedule on the rounds queue: once per tick however many workers run."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest

import echomq
from codemojex import keys, store
from codemojex.config import Config
from codemojex.game import Game
from codemojex.rounds import SWEEP_EVERY_MS, SWEEP_PAYLOAD
from codemojex.worker import round_jobs, run_worker
from echomq.schedules import tick_job_id
from harness.cluster import ValkeyCluster
from tests.game.test_exactly_once import wait_until
from tests.game.test_partitioned_game import _spawn_worker


async def _dead_guess(game: Game) -> str:
    """One job on the guesses queue that dies of an expired lease (max_attempts 1)."""
    job_id = await game.queue.jobs.enqueue({"n": 0}, max_attempts=1)
    assert await game.queue.jobs.claim("WRK_doomed", 100) is not None
    await asyncio.sleep(0.15)
    while job_id not in await game.queue.stalled.reap(limit=10):
        await asyncio.sleep(0.05)
    return job_id


async def test_adding_the_sweep_again_keeps_its_tick(game: Game) -> None:
    schedules = game.rounds.queue.schedules
    assert await game.rounds.schedule_sweep() is True
    first = await schedules.get(keys.SWEEP_SCHEDULE)
    assert first is not None and first.next_due_ms is not None
    assert (first.every_ms, first.missed_policy, first.lane, first.payload) == (
        SWEEP_EVERY_MS,
        "skip",
        None,
        SWEEP_PAYLOAD,
    )
    # Workers restarting over and over leave the due tick where it was: it still fires.
    for _ in range(3):
        await asyncio.sleep(0.01)
        assert await game.rounds.schedule_sweep() is False
    again = await schedules.get(keys.SWEEP_SCHEDULE)
    assert again is not None and again.next_due_ms == first.next_due_ms
    # A paused or altered schedule is put back as the game needs it.
    await schedules.pause(keys.SWEEP_SCHEDULE)
    assert await game.rounds.schedule_sweep() is True
    await schedules.add(keys.SWEEP_SCHEDULE, SWEEP_PAYLOAD, every_ms=60_000)
    assert await game.rounds.schedule_sweep() is True
    back = await schedules.get(keys.SWEEP_SCHEDULE)
    assert back is not None and not back.paused and back.every_ms == SWEEP_EVERY_MS


async def test_a_sweep_job_opens_a_missing_round_and_archives_the_dead(game: Game) -> None:
    dead = await _dead_guess(game)
    assert await game.rounds.current() is None
    handle = round_jobs(game)
    result = await handle(echomq.Claim("JOB_sweep", None, dict(SWEEP_PAYLOAD), echomq.Token(1), 0))
    current = await game.rounds.current()
    assert current is not None
    assert result == {"swept": True, "round_id": current.round_id, "archived": 1}
    assert dead in {r.job_id for r in await store.list_dead(game.engine, limit=10)}
    # Its close job is scheduled, as ensure() always did.
    close = await game.rounds.queue.jobs.get(current.close_job)
    assert close is not None and close.state == "scheduled"
    # Any other job on the queue is a round's close.
    closed = await handle(
        echomq.Claim(current.close_job, None, {"round_id": current.round_id}, echomq.Token(1), 0)
    )
    assert closed["closed"] == current.round_id and closed["opened"] is not None


@pytest.mark.slow
async def test_two_workers_sweep_once_per_tick(game: Game, config: Config) -> None:
    # Workers of a partitioned game: their sweep is on the one rounds queue all the same.
    queue = game.rounds.queue
    workers = [_spawn_worker(config, f"WRK_sweep_{n}", 0) for n in "ab"]
    try:

        async def ticked(times: int) -> bool:
            assert all(w.poll() is None for w in workers), "a worker exited"
            info = await queue.schedules.get(keys.SWEEP_SCHEDULE)
            return info is not None and info.fired >= times

        # Two ticks with both workers up, each running the queue's scheduler: one sweep
        # job per tick between them.
        await wait_until(lambda: ticked(2), timeout=30)
        info = await queue.schedules.get(keys.SWEEP_SCHEDULE)
        assert info is not None and info.missed == 0 and info.next_due_ms is not None
        first_due = info.next_due_ms - SWEEP_EVERY_MS * (info.fired + info.missed)
        ticks = [
            tick_job_id(queue.name, keys.SWEEP_SCHEDULE, first_due + k * SWEEP_EVERY_MS)
            for k in range(info.fired)
        ]

        async def swept() -> bool:
            rows = [await queue.jobs.get(j) for j in ticks]
            return all(r is not None and r.state == "completed" for r in rows)

        await wait_until(swept)
        for j in ticks:
            row = await queue.jobs.get(j)
            assert row is not None and row.result["swept"] is True
        # Every completion on the rounds queue is a tick's (its one close job is 120 s
        # away): as many sweeps ran as ticks fired, not one per worker per tick.
        completed = (await queue.stats())["counters"].get("completed", 0)
        after = await queue.schedules.get(keys.SWEEP_SCHEDULE)
        assert after is not None and info.fired <= completed <= after.fired
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                await asyncio.to_thread(w.wait, 15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


@pytest.mark.slow
async def test_the_sweep_ticks_on_a_partitioned_game_on_a_cluster(
    config: Config, tmp_path: Path
) -> None:
    # Each queue in its own slot: the schedule's keys are in the rounds queue's, and the
    # sweep archives a death from a guesses partition's.
    cluster = ValkeyCluster(tmp_path / "cluster", masters=3)
    cluster.start()
    try:
        config = config.with_(valkey_url=cluster.url, partitions=3)  # the same SQLite
        game = Game.connect(config)
        try:
            partition = game.queues.partitions[1]
            dead = await partition.jobs.enqueue({"n": 0}, max_attempts=1)
            assert await partition.jobs.claim("WRK_doomed", 100) is not None
            await asyncio.sleep(0.15)
            await wait_until(lambda: _reaped(partition, dead))
            worker = asyncio.create_task(run_worker(config, "WRK_cluster"))
            try:

                async def swept() -> bool:
                    info = await game.rounds.queue.schedules.get(keys.SWEEP_SCHEDULE)
                    if info is None or info.fired < 1 or info.next_due_ms is None:
                        return False
                    due = info.next_due_ms - SWEEP_EVERY_MS
                    job = tick_job_id(game.rounds.queue.name, keys.SWEEP_SCHEDULE, due)
                    row = await game.rounds.queue.jobs.get(job)
                    return row is not None and row.state == "completed"

                await wait_until(swept, timeout=30)
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
            rows = await store.list_dead(game.engine, limit=10)
            assert [(r.job_id, r.queue) for r in rows] == [(dead, partition.name)]
        finally:
            await game.close()
    finally:
        cluster.stop()


async def _reaped(queue: echomq.Queue, job_id: str) -> bool:
    return job_id in await queue.stalled.reap(limit=10)
