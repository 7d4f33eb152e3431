"""A guess is counted once: crashes after the commit, zombies, duplicate scorers, any order."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import echomq
from codemojex import store
from codemojex.config import Config
from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE, feedback, points_for
from codemojex.score_worker import ScoreWorker
from codemojex.worker import run_worker

ROOT = Path(__file__).parents[2]


async def new_players(game: Game, n: int) -> list[str]:
    return [(await game.create_player(f"p{i}")).player_id for i in range(n)]


async def count_scores(game: Game, job_id: str) -> int:
    from sqlalchemy import func, select

    from codemojex.store.models import ScoreRow

    async with game.engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count()).select_from(ScoreRow).where(ScoreRow.job_id == job_id)
                )
            ).scalar_one()
        )


async def wait_until(pred: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def rescue_until_completed(game: Game, config: Config, job_id: str) -> None:
    """A second worker (in this process) runs until ``job_id`` is completed: the rescue of
    a job its first holder died with."""
    task = asyncio.create_task(run_worker(config, "WRK_rescuer"))
    try:

        async def done() -> bool:
            i = await game.queue.jobs.get(job_id)
            return i is not None and i.state == "completed"

        await wait_until(done)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def consume_until_completed(
    game: Game, handler: echomq.Handler, jobs: list[str], worker_id: str, concurrency: int
) -> None:
    """Run an in-process Consumer over the guesses queue until every one of ``jobs`` is
    completed, then stop it cleanly."""
    consumer = echomq.Consumer(game.queue, handler, lease_ms=10_000, concurrency=concurrency,
                               worker_id=worker_id, source="lanes")  # fmt: skip
    task = asyncio.create_task(consumer.run())
    try:

        async def all_completed() -> bool:
            infos = [await game.queue.jobs.get(j) for j in jobs]
            return all(i is not None and i.state == "completed" for i in infos)

        await wait_until(all_completed)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)


async def test_worker_killed_after_commit_before_complete(game: Game, config: Config) -> None:
    (player,) = await new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))

    env = dict(
        os.environ,
        CODEMOJEX_TEST_CRASH="after_commit:1.0",
        CODEMOJEX_VALKEY_URL=config.valkey_url or "",
        CODEMOJEX_DATABASE_URL=config.sql_url,
        CODEMOJEX_LAPSE_MS="500",
        CODEMOJEX_LEASE_MS="2000",
        CODEMOJEX_WORKER_ID="WRK_crashy",
    )
    proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; the wait runs in a thread
        [
            sys.executable,
            "-c",
            (
                "import asyncio; from codemojex.config import Config; "
                "from codemojex.worker import run_worker; asyncio.run(run_worker(Config.from_env()))"
            ),
        ],
        env=env,
        cwd=ROOT,
    )
    try:
        assert await asyncio.to_thread(proc.wait, 30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    # It committed, then died holding the job: one row, job still active.
    assert await count_scores(game, acc.job_id) == 1
    info = await game.queue.jobs.get(acc.job_id)
    assert info is not None and info.state == "active"

    await rescue_until_completed(game, config, acc.job_id)
    assert await count_scores(game, acc.job_id) == 1
    board = await game.leaderboard()
    assert [(p["player_id"], p["points"]) for p in board] == [(player, 110)]
    info = await game.queue.jobs.get(acc.job_id)
    assert info is not None and info.attempts == 2 and info.result["points"] == 110


async def test_zombie_completion_after_reclaim_is_refused(game: Game, config: Config) -> None:
    (player,) = await new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    zombie_claim = await game.queue.lanes.claim("WRK_zombie", 100)
    assert zombie_claim is not None and zombie_claim.job_id == acc.job_id
    await asyncio.sleep(0.15)
    assert await game.queue.stalled.reap() == [acc.job_id]
    # The rescuer scores and completes it.
    rescue = await game.queue.lanes.claim("WRK_rescue", 5_000)
    assert rescue is not None
    result = await ScoreWorker(game.engine, game.rounds, "WRK_rescue").handle(rescue)
    assert await game.queue.jobs.complete(rescue.job_id, rescue.token, result)
    # The zombie wakes up, scores (its SQL write is a no-op) and tries to complete.
    late = await ScoreWorker(game.engine, game.rounds, "WRK_zombie").handle(zombie_claim)
    assert late == {**result, "worker_id": "WRK_zombie"}
    assert not await game.queue.jobs.complete(zombie_claim.job_id, zombie_claim.token, late)
    assert await count_scores(game, acc.job_id) == 1
    assert (await game.leaderboard())[0]["points"] == 110
    stats = await game.queue.stats()
    assert stats["counters"]["completed"] == 1 and stats["refused"]["complete"] == 1


async def test_same_guess_scored_by_two_workers_at_once(game: Game) -> None:
    (player,) = await new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    claim = await game.queue.lanes.claim("WRK_a", 5_000)
    assert claim is not None
    a = ScoreWorker(game.engine, game.rounds, "WRK_a")
    b = ScoreWorker(game.engine, game.rounds, "WRK_b")
    await asyncio.gather(a.handle(claim), b.handle(claim))
    assert a.scored + b.scored == 1
    assert await count_scores(game, acc.job_id) == 1
    assert (await game.leaderboard())[0]["points"] == 110


async def test_exactly_one_round_follows_each_close(game: Game) -> None:
    first = await game.rounds.ensure()
    claim = echomq.Claim(first.close_job, None, {"round_id": first.round_id}, 1, 0)
    results = await asyncio.gather(*(game.rounds.handle_close(claim) for _ in range(8)))
    opened = {r["opened"] for r in results}
    current = await game.rounds.current()
    assert current is not None and opened == {current.round_id}
    assert current.prev == first.round_id
    # its close job exists, due at its close
    info = await game.queue.jobs.get(current.close_job)
    rounds_info = await game.rounds.queue.jobs.get(current.close_job)
    assert info is None and rounds_info is not None and rounds_info.state == "scheduled"


Plan = list[tuple[int, int, bool]]  # (player index, emoji pattern, solve?)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 7), st.booleans()), min_size=1, max_size=10
    ),
    seed=st.integers(0, 2**32 - 1),
)
async def test_points_do_not_depend_on_scoring_order_crashes_or_retries(
    game: Game, plan: Plan, seed: int
) -> None:
    await game.conn.flushall()
    rng = random.Random(seed)
    players = await new_players(game, 3)
    rnd, _ = await game.current_round()
    accepted: list[tuple[str, int, tuple[str, ...]]] = []
    for who, pattern, solve in plan:
        guess = list(rnd.secret) if solve else [DEFAULT_PALETTE[pattern]] * 4
        acc = await game.submit(players[who], rnd.round_id, guess)
        accepted.append((players[who], acc.seq, tuple(guess)))
    # Expected standings straight from the rules, with no queue at all.
    expected: dict[str, int] = {}
    for pid, seq, guess in accepted:
        pts = points_for(seq, feedback(rnd.secret, guess).solved)
        expected[pid] = max(expected.get(pid, 0), pts)

    claims = (await game.queue.lanes.claim_many("WRK_h", 60_000, 100)).claims
    rng.shuffle(claims)
    scorer = ScoreWorker(game.engine, game.rounds, "WRK_h")
    for c in claims:
        for _ in range(rng.randint(1, 3)):  # crashes and retries: score it again
            await scorer.handle(c)
    for c in rng.sample(claims, len(claims)):
        await game.queue.jobs.complete(c.job_id, c.token, None)
    board = {p["player_id"]: p["points"] for p in await game.leaderboard()}
    assert {pid: board.get(pid, 0) for pid in expected} == expected
    assert sum(1 for _ in await store.scores_for(game.engine, players[0], rnd.round_id)) == sum(
        1 for pid, _, _ in accepted if pid == players[0]
    )


async def test_dead_jobs_land_in_sql_and_retry_puts_them_back_on_their_lane(game: Game) -> None:
    from codemojex.admin import Admin

    (player,) = await new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    for _ in range(5):  # max_attempts deliveries, each failing
        await game.conn.zadd(game.queue.keys.scheduled, {acc.job_id: 0}, xx=True)
        claim = await game.queue.lanes.claim("WRK_x", 5_000)
        assert claim is not None
        outcome = await game.queue.jobs.fail(claim.job_id, claim.token, "boom")
    assert outcome == "dead"
    admin = Admin(game)
    assert await admin.archive_dead() == 1
    assert await admin.archive_dead() == 0  # recorded once
    (dead,) = await admin.dead_jobs()
    assert dead["job_id"] == acc.job_id and dead["error"] == "boom"
    assert dead["payload"]["guess"] == list(rnd.secret)
    await admin.retry_dead(acc.job_id)
    assert await game.queue.lanes.depth(player) == 1
    claim = await game.queue.lanes.claim("WRK_y", 5_000)
    assert claim is not None and claim.job_id == acc.job_id and claim.token == 6
    assert await admin.dead_jobs() == []
