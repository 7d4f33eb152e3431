"""A worker's handlers share commits: guesses scored at the same time go in one transaction,
each is counted once, and every job is completed only after its batch committed."""

from __future__ import annotations

import asyncio

import echomq
from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE, feedback, points_for
from codemojex.score_worker import ScoreWorker
from tests.game.test_exactly_once import new_players, wait_until


async def test_handlers_scoring_at_once_share_commits_and_count_each_guess_once(
    game: Game,
) -> None:
    players = await new_players(game, 4)
    rnd, _ = await game.current_round()
    expected: dict[str, int] = {}
    jobs = []
    for i in range(40):
        pid = players[i % 4]
        guess = list(rnd.secret) if i % 7 == 3 else [DEFAULT_PALETTE[i % 8]] * 4
        acc = await game.submit(pid, rnd.round_id, guess)
        jobs.append(acc.job_id)
        pts = points_for(acc.seq, feedback(rnd.secret, tuple(guess)).solved)
        expected[pid] = max(expected.get(pid, 0), pts)

    scorer = ScoreWorker(game.engine, game.rounds, "WRK_batch")
    consumer = echomq.Consumer(game.queue, scorer.handle, lease_ms=10_000, concurrency=32,
                               worker_id="WRK_batch", source="lanes")  # fmt: skip
    task = asyncio.create_task(consumer.run())
    try:

        async def all_completed() -> bool:
            infos = [await game.queue.jobs.get(j) for j in jobs]
            return all(i is not None and i.state == "completed" for i in infos)

        await wait_until(all_completed)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
        await scorer.close()
    assert scorer.scored == len(jobs)
    assert scorer.group.records == len(jobs) and scorer.group.batches < len(jobs)
    board = {p["player_id"]: p["points"] for p in await game.leaderboard()}
    assert board == expected
