"""Every dead job reaches the durable floor, in bounded batches, however many there are."""

from __future__ import annotations

import asyncio

import pytest

from codemojex import store
from codemojex.admin import ARCHIVE_BATCH, ARCHIVE_OVERLAP_MS, Admin
from codemojex.errors import Conflict
from codemojex.game import Game


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


async def test_valkey_keeps_at_most_the_newest_dead_jobs_once_they_are_on_the_floor(
    game: Game,
) -> None:
    # 300 deaths, then one more over a second later; 100 kept: the 201 oldest leave
    # Valkey, but only once a sweep put them on the floor and its overlap is behind them;
    # the floor keeps all 301, a retry of a trimmed one is refused (409), a kept one's
    # works.
    ids = await _kill(game, 300)
    await asyncio.sleep(ARCHIVE_OVERLAP_MS / 1000 + 0.1)
    ids += await _kill(game, 1)
    admin = Admin(game)
    assert await admin.archive_dead(keep=100) == 301
    assert (await game.queue.stats())["dead"] == 100
    rows = await store.list_dead(game.engine, limit=5_000)
    assert {r.job_id for r in rows} >= set(ids)
    kept = {info.job_id for info in await game.queue.jobs.dead(limit=1_000)}
    assert len(kept) == 100 and kept <= set(ids) and ids[-1] in kept
    trimmed = sorted(set(ids) - kept)
    assert [await game.queue.jobs.get(jid) for jid in trimmed[:20]] == [None] * 20
    with pytest.raises(Conflict):
        await admin.retry_dead(trimmed[0])
    await admin.retry_dead(min(kept))
    assert (await game.queue.stats())["dead"] == 99


async def test_nothing_leaves_valkey_before_it_is_on_the_floor(game: Game) -> None:
    # Deaths the floor has not recorded yet are never trimmed, whatever their number.
    await _kill(game, 50)
    admin = Admin(game)
    assert await admin._trim_dead(game.queue, keep=0, safe_before_ms=0) == 0
    assert (await game.queue.stats())["dead"] == 50
    assert await admin.archive_dead(keep=0) == 50  # all within the overlap: none trimmed
    assert (await game.queue.stats())["dead"] == 50
