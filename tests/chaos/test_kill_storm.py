"""Scenario 1 (and 8b): a kill storm over real ScoreWorker processes until the queue drains.

Guesses go in through ``Game.submit``; 4 worker processes score them while a random one is
SIGKILLed every 0.3–1.5 s and respawned, and every worker also kills itself at random at
the crash points (after its claim, after its SQL commit, mid-extend) through the test-only
``CODEMOJEX_TEST_CRASH`` switch. One variant also takes Valkey down for 5 s mid-storm;
another runs the storm on PostgreSQL. Pass: one score row per accepted guess, totals equal
to the rules applied to the inputs, 0 lost, 0 doubled.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from codemojex.admin import Admin
from codemojex.config import Config
from codemojex.game import Game
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.conftest import make_config, worker_env
from tests.chaos.harness import Figures, Pool, Zygote

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(harness.size(200, 1_200))]

WORKERS = 4
# Per handled job (after_claim, after_commit) and per lease-extension round (mid_extend).
CRASH = "after_claim:0.005,after_commit:0.005,mid_extend:0.05"
KILL_EVERY_S = (0.3, 1.5)
OUTAGE_S = 5.0


async def kill_storm(
    game: Game,
    config: Config,
    valkey: EmbeddedValkey,
    zygote: Zygote,
    log_dir: Path,
    pools: list[Pool],
    n: int,
    outage_s: float = 0.0,
) -> dict[str, object]:
    rng = random.Random()
    players = await harness.new_players(game, max(8, n // 25))
    accepted = await harness.submit_many(game, players, n, rng)
    assert len(accepted) == n
    pool = Pool(zygote, log_dir, env=worker_env(config, CODEMOJEX_TEST_CRASH=CRASH))
    pools.append(pool)
    for _ in range(WORKERS):
        pool.spawn()

    admin = Admin(game)
    retried: set[str] = set()
    outage: dict[str, float] = {}
    t0 = time.monotonic()
    next_kill = t0 + rng.uniform(*KILL_EVERY_S)
    next_check = t0
    deadline = t0 + harness.size(150, 600)
    completed = 0

    async def take_valkey_down() -> None:
        outage["start"] = time.monotonic() - t0
        valkey.kill()  # a crash, not a clean stop
        await asyncio.sleep(outage_s)
        valkey.start()
        outage["end"] = time.monotonic() - t0

    outage_task: asyncio.Task[None] | None = None
    try:
        while True:
            now = time.monotonic()
            assert now < deadline, f"not drained: {completed}/{n} completed"
            for _ in pool.poll():  # killed by us or by a crash point: respawn at once
                pool.spawn()
            if now >= next_kill:
                pool.kill(rng.choice(pool.live()))
                next_kill = now + rng.uniform(*KILL_EVERY_S)
            if now >= next_check:
                next_check = now + 0.25
                try:
                    stats = await game.queue.stats()
                except harness.TRANSIENT:
                    stats = None
                if stats is not None:
                    completed = stats["counters"].get("completed", 0)
                    if outage_s and outage_task is None and completed >= 0.4 * n:
                        outage_task = asyncio.create_task(take_valkey_down())
                    if stats["dead"]:
                        # Out of deliveries: the operator's path, from the durable floor.
                        await admin.archive_dead()
                        for d in await admin.dead_jobs():
                            await admin.retry_dead(d["job_id"])
                            retried.add(d["job_id"])
                    if (
                        completed >= n
                        and stats["active"] == stats["pending"] == 0
                        and stats["scheduled"] == 0
                        and (outage_task is None or outage_task.done())
                        and (outage_task is not None or not outage_s)
                    ):
                        break
            await asyncio.sleep(0.02)
    finally:
        if outage_task is not None:
            await outage_task
    elapsed = time.monotonic() - t0
    await pool.stop_all()
    stats = await game.queue.stats()
    verdict = await harness.verdict(game, accepted)
    hits = pool.crashpoints()
    fig: dict[str, object] = {
        "guesses": n,
        "workers": WORKERS,
        "drained_s": round(elapsed, 1),
        "storm_kills": pool.killed,
        "crashpoint_deaths": pool.self_died,
        "crashpoints": dict(sorted(hits.items())),
        "self_exit_codes": dict(pool.exit_codes),
        "deliveries": stats["counters"].get("claimed", 0),
        "reclaims": stats["counters"].get("reaped", 0),
        "stale_completions_refused": stats["refused"].get("complete", 0),
        "stale_extends_refused": stats["refused"].get("extend", 0),
        "failed_attempts": stats["counters"].get("failed", 0),
        "dead_lettered_then_retried": len(retried),
        **verdict,
    }
    if outage_s:
        fig["valkey_outage_s"] = round(outage["end"] - outage["start"], 1)
    assert stats["counters"].get("completed") == n
    assert verdict == {"score_rows": n, "lost": 0, "doubled": 0, "strays": 0, "wrong_totals": 0}, (
        verdict
    )
    assert stats["active"] == stats["pending"] == stats["scheduled"] == stats["dead"] == 0
    return fig


async def test_kill_storm_sqlite(
    game: Game,
    config: Config,
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    fig = await kill_storm(
        game, config, valkey, zygote, tmp_path / "w", pools, harness.size(2_000, 2_000)
    )
    figures.record("1 kill storm (SQLite)", **fig)


async def test_kill_storm_with_a_valkey_outage(
    game: Game,
    config: Config,
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    fig = await kill_storm(
        game,
        config,
        valkey,
        zygote,
        tmp_path / "w",
        pools,
        harness.size(1_000, 2_000),
        outage_s=OUTAGE_S,
    )
    figures.record("8 kill storm + 5 s Valkey outage (SQLite)", **fig)


@pytest.mark.postgres
async def test_kill_storm_postgres(
    valkey: EmbeddedValkey,
    pg_url: str,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    config = make_config(valkey.url, pg_url, tmp_path)
    game = Game.connect(config)
    try:
        fig = await kill_storm(
            game, config, valkey, zygote, tmp_path / "w", pools, harness.size(2_000, 2_000)
        )
    finally:
        await game.close()
    figures.record("1 kill storm (PostgreSQL)", **fig)
