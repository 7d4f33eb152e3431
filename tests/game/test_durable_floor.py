"""Every dead job reaches the durable floor, in bounded batches, however many there are."""

from __future__ import annotations

import asyncio

from codemojex import store
from codemojex.game import ARCHIVE_BATCH, Admin, Game


async def _kill(game: Game, n: int) -> list[str]:
    """``n`` jobs that die of one expired lease each (max_attempts 1)."""
    ids = [await game.queue.jobs.enqueue({"n": i}, max_attempts=1) for i in range(n)]
    claimed = 0
    while claimed < n:
        claimed += len((await game.queue.jobs.claim_many("WRK_doomed", 100, n)).claims)
    await asyncio.sleep(0.15)
    reaped: list[str] = []
    while len(reaped) < n:
        reaped += await game.queue.stalled.reap(limit=1_000)
    assert (await game.queue.stats())["dead"] >= n
    return ids


async def test_a_thousand_dead_jobs_all_reach_sql(game: Game) -> None:
    ids = await _kill(game, 1_000)
    admin = Admin(game)
    assert await admin.archive_dead() == 1_000  # five batches of 200 in one sweep
    rows = await store.list_dead(game.engine, limit=5_000)
    assert {r.job_id for r in rows} >= set(ids)
    assert await admin.archive_dead() == 0  # nothing new; the overlap re-records nothing
    # Deaths after the sweep are found by the next one, from where it left off.
    later = await _kill(game, ARCHIVE_BATCH + 5)
    assert await admin.archive_dead() == ARCHIVE_BATCH + 5
    rows = await store.list_dead(game.engine, limit=5_000)
    assert {r.job_id for r in rows} >= set(ids) | set(later)
