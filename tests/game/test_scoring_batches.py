"""A worker's handlers share commits: guesses scored at the same time go in one transaction,
each is counted once, and every job is completed only after its batch committed."""

from __future__ import annotations

from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE, feedback, points_for
from codemojex.score_worker import ScoreWorker
from tests.game.test_exactly_once import consume_until_completed, new_players


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
    try:
        await consume_until_completed(game, scorer.handle, jobs, "WRK_batch", concurrency=32)
    finally:
        await scorer.close()
    assert scorer.scored == len(jobs)
    assert scorer.group.records == len(jobs) and scorer.group.batches < len(jobs)
    board = {p["player_id"]: p["points"] for p in await game.leaderboard()}
    assert board == expected
