"""Scenario 7: SIGTERM. In-flight guesses finish within the grace period or are released
(pending again, no delivery spent: the next claim's token is the old one + 1); nothing stays leased by the stopped worker; all are scored once."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

from codemojex.config import Config
from codemojex.game import Game
from tests.chaos import harness
from tests.chaos.conftest import worker_env
from tests.chaos.harness import Figures, Pool, Zygote

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("score_ms", [600, 6_000], ids=["finishes", "outlives-grace"])
async def test_sigterm_finishes_or_releases_in_flight_guesses(
    game: Game,
    config: Config,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
    score_ms: int,
) -> None:
    grace_ms = config.lease_ms  # the Consumer's default grace is its lease
    players = await harness.new_players(game, 4)
    accepted = await harness.submit_many(game, players, 16, random.Random())
    # Prefetch 4: the stopping worker also holds jobs it never started, to hand back.
    pool = Pool(
        zygote,
        tmp_path / "w",
        env=worker_env(
            config,
            CODEMOJEX_SCORE_DELAY_MS=str(score_ms),
            CODEMOJEX_PREFETCH="4",
            CODEMOJEX_CONCURRENCY="4",
        ),
    )
    rescue_pool = Pool(zygote, tmp_path / "r", env=worker_env(config))
    pools += [pool, rescue_pool]
    w = pool.spawn()

    async def holding() -> bool:  # 4 running + 4 prefetched (concurrency 4)
        return await game.conn.scard(game.queue.keys.worker_jobs(w.worker_id)) == 8

    await harness.wait_until(holding, 15, "the worker holds a full load")
    await asyncio.sleep(0.2)
    ids = {a.job_id for a in accepted}
    before = {j: await game.queue.jobs.get(j) for j in ids}
    held = {j for j, i in before.items() if i is not None and i.state == "active"}
    t = time.monotonic()
    w.terminated = True
    os.kill(w.pid, signal.SIGTERM)
    code = await zygote.wait_exit(w.pid, grace_ms / 1000 + 10)
    exit_s = time.monotonic() - t
    after = {j: await game.queue.jobs.get(j) for j in ids}
    finished = {j for j in held if after[j] and after[j].state == "completed"}  # type: ignore[union-attr]
    released = {j for j in held if after[j] and after[j].state == "pending"}  # type: ignore[union-attr]
    still_leased = [
        j for j, i in after.items() if i and i.state == "active" and i.worker_id == w.worker_id
    ]
    registered = await harness.registered(game, w.worker_id)

    # Whatever is left is scored by another worker, once.
    r = rescue_pool.spawn()

    async def drained() -> bool:
        return bool((await game.queue.stats())["counters"].get("completed", 0) == len(ids))

    await harness.wait_until(drained, 30, "the rescue worker drained the queue")
    await rescue_pool.stop_all()
    verdict = await harness.verdict(game, accepted)
    figures.record(
        f"7 graceful shutdown (score {score_ms} ms, grace {grace_ms} ms)",
        held_at_sigterm=len(held),
        finished_in_grace=len(finished),
        released=len(released),
        exit_code=code,
        exit_s=round(exit_s, 2),
        left_leased=len(still_leased),
        still_registered=registered,
        **verdict,
    )
    assert code == 0 and not still_leased and not registered
    assert finished | released == held
    for j in released:
        i, b = after[j], before[j]
        assert i is not None and b is not None
        assert i.attempts == b.attempts and i.stalls == 0 and i.failures == 0
    assert exit_s < grace_ms / 1000 + 3
    if score_ms < grace_ms:
        assert len(finished) >= 4  # the running ones finished within the grace
    else:
        assert not finished  # nothing could finish: all handed back
    assert r.code is None or r.terminated
    assert verdict == {
        "score_rows": len(ids),
        "lost": 0,
        "doubled": 0,
        "strays": 0,
        "wrong_totals": 0,
    }
