"""The zombie that matters: its job is *active again*, leased to a rescuer under a newer
token, when the presumed-dead worker calls. Only the fencing token tells the two apart
(the job's state is ``active`` for both), so every fenced call must refuse the old token
and leave the rescuer's lease untouched, and the guess still counts once."""

from __future__ import annotations

import asyncio

from codemojex.game import Game
from codemojex.score_worker import ScoreWorker


async def test_a_zombie_is_refused_while_its_job_is_leased_to_the_rescuer(game: Game) -> None:
    player = (await game.create_player("z")).player_id
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    zombie = await game.queue.lanes.claim("WRK_zombie", 100)
    assert zombie is not None and zombie.job_id == acc.job_id
    await asyncio.sleep(0.15)
    assert await game.queue.stalled.reap() == [acc.job_id]
    rescue = await game.queue.lanes.claim("WRK_rescue", 5_000)
    assert rescue is not None and rescue.token == zombie.token + 1
    held = await game.queue.jobs.get(acc.job_id)
    assert held is not None and held.state == "active"

    # The zombie wakes while the rescuer holds the job: it scores (the SQL write is keyed
    # on the JOB id) and every call it makes under its old token is refused.
    late = await ScoreWorker(game.engine, game.rounds, "WRK_zombie").handle(zombie)
    jobs = game.queue.jobs
    assert not await jobs.extend(zombie.job_id, zombie.token, 60_000)
    assert not await jobs.complete(zombie.job_id, zombie.token, late)
    assert await jobs.fail(zombie.job_id, zombie.token, "late failure") == "stale"
    assert not await jobs.release(zombie.job_id, zombie.token)
    still = await game.queue.jobs.get(acc.job_id)
    assert still is not None and still.state == "active"
    assert still.attempts == rescue.token
    assert still.lease_until_ms == rescue.lease_until_ms  # the zombie's extend moved nothing

    result = await ScoreWorker(game.engine, game.rounds, "WRK_rescue").handle(rescue)
    assert await jobs.complete(rescue.job_id, rescue.token, result)
    stats = await game.queue.stats()
    assert stats["counters"]["completed"] == 1
    assert (await game.leaderboard())[0]["points"] == 110
