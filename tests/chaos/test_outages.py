"""Scenario 8: outages. Valkey down at start (the web answers 503 at once and recovers by
itself, a worker waits with backoff and recovers without a restart), and SQL unavailable
for a few seconds mid-scoring (jobs fail and are retried, none lost). The 5 s Valkey
outage in the middle of a kill storm is in test_kill_storm.py."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from sqlalchemy import text

import echomq
from codemojex.config import Config
from codemojex.game import Game
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.conftest import make_config, worker_env
from tests.chaos.harness import Figures, Pool, Zygote
from tests.pg import PgCluster

pytestmark = pytest.mark.chaos

DOWN_S = 3.0


async def _timed(call: Any) -> tuple[Any, float]:
    t = time.monotonic()
    resp = await call
    return resp, (time.monotonic() - t) * 1000


async def test_valkey_down_at_start_then_everything_recovers(
    tmp_path: Path,
    sql_url: str,
    zygote: Zygote,
    pools: list[Pool],
    figures: Figures,
) -> None:
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="always")  # not started yet
    config = make_config(server.url, sql_url, tmp_path)
    pool = Pool(zygote, tmp_path / "w", env=worker_env(config))
    pools.append(pool)
    worker = pool.spawn()
    try:
        async with harness.serve(config) as http:
            answers: dict[str, int] = {}
            slowest = 0.0
            for name, call in (
                ("healthz", http.get("/healthz")),
                ("round", http.get("/api/round")),
                ("players", http.post("/api/players", json={"name": "Ada"})),
            ):
                resp, ms = await _timed(call)
                answers[name] = resp.status_code
                slowest = max(slowest, ms)
                assert resp.status_code == 503, (name, resp.text)
                assert resp.json()["error"] == "unavailable" and "retry-after" in resp.headers
            await asyncio.sleep(DOWN_S)
            assert pool.live() == [worker]  # the worker waits; it does not die

            server.start()
            t_up = time.monotonic()

            async def healthy() -> bool:
                return bool((await http.get("/healthz")).status_code == 200)

            web_s = await harness.wait_until(healthy, 15, "the web answers again")
            conn = redis.asyncio.Redis.from_url(server.url)
            try:
                q = echomq.Queue(conn, "guesses")
                await harness.wait_until(
                    lambda: harness.registered(q, worker.worker_id), 20, "the worker recovered"
                )
            finally:
                await conn.aclose()
            worker_s = time.monotonic() - t_up
            # And the whole path works: a player, a guess, its score.
            player = (await http.post("/api/players", json={"name": "Ada"})).json()
            auth = {"Authorization": f"Bearer {player['token']}"}
            rnd = (await http.get("/api/round")).json()
            sub = await http.post(
                "/api/guesses",
                headers=auth,
                json={"round_id": rnd["round_id"], "guess": ["🍎"] * 4},
            )
            assert sub.status_code == 202, sub.text

            async def scored() -> bool:
                view = await http.get(f"/api/guesses/{sub.json()['job_id']}", headers=auth)
                return view.status_code == 200 and view.json()["score"] is not None

            scored_s = await harness.wait_until(scored, 20, "the guess is scored")
    finally:
        await pool.stop_all()
        server.stop()
    figures.record(
        "8 Valkey down at start",
        down_s=DOWN_S,
        answers_while_down=answers,
        slowest_503_ms=round(slowest),
        web_recovered_s=round(web_s, 2),
        worker_recovered_s=round(worker_s, 2),
        guess_scored_s=round(scored_s, 2),
        worker_restarts=0,
    )
    assert slowest < 6_000  # never hangs
    assert worker.code is None or worker.terminated


async def _sql_outage(
    game: Game,
    config: Config,
    zygote: Zygote,
    log_dir: Path,
    pools: list[Pool],
    n: int,
    take_down: Any,
    bring_back: Any,
    down_s: float,
) -> dict[str, Any]:
    players = await harness.new_players(game, max(10, n // 25))  # under the lane cap
    accepted = await harness.submit_many(game, players, n, random.Random())
    # Scoring takes 20 ms a guess here, so that the outage lands mid-stream.
    pool = Pool(zygote, log_dir, env=worker_env(config, CODEMOJEX_SCORE_DELAY_MS="20"))
    pools.append(pool)
    for _ in range(2):
        pool.spawn()

    async def some_done() -> bool:
        return bool((await game.queue.stats())["counters"].get("completed", 0) >= n // 4)

    await harness.wait_until(some_done, 30, "a quarter scored")
    t = time.monotonic()
    await take_down()
    await asyncio.sleep(down_s)
    await bring_back()
    outage_s = time.monotonic() - t

    async def drained() -> bool:
        return bool((await game.queue.stats())["counters"].get("completed", 0) == n)

    await harness.wait_until(drained, 90, "every guess scored after the outage")
    await pool.stop_all()
    stats = await game.queue.stats()
    verdict = await harness.verdict(game, accepted)
    fig = {
        "guesses": n,
        "outage_s": round(outage_s, 1),
        "failed_attempts": stats["counters"].get("failed", 0),
        "dead": stats["counters"].get("dead", 0),
        "worker_deaths": pool.self_died,
        **verdict,
    }
    assert stats["counters"].get("failed", 0) > 0  # the outage was felt
    assert stats["counters"].get("dead", 0) == 0 and pool.self_died == 0
    assert verdict == {"score_rows": n, "lost": 0, "doubled": 0, "strays": 0, "wrong_totals": 0}, (
        verdict
    )
    return fig


@pytest.mark.postgres
async def test_postgres_down_for_a_few_seconds(
    valkey: EmbeddedValkey,
    pg_cluster: PgCluster,
    pg_url: str,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    config = make_config(valkey.url, pg_url, tmp_path)
    game = Game.connect(config)
    # The throwaway cluster runs with synchronous_commit=off (fast, not durable): a crash
    # of it then loses commits it had acknowledged, and scores with them (this test found
    # that). Production's default is on; so is this database.
    async with game.engine.begin() as conn:
        await conn.execute(
            text(f'ALTER DATABASE "{pg_url.rsplit("/", 1)[1]}" SET synchronous_commit = on')
        )
    await game.engine.dispose()

    async def stop() -> None:
        await asyncio.to_thread(
            pg_cluster._run,
            "pg_ctl",
            "-D",
            str(pg_cluster.datadir),
            "-m",
            "immediate",
            "-w",
            "stop",
        )

    async def start() -> None:
        await asyncio.to_thread(pg_cluster._pg_ctl_start)

    try:
        fig = await _sql_outage(
            game, config, zygote, tmp_path / "w", pools, harness.size(400, 2_000), stop, start, 2.0
        )
    finally:
        await game.close()
    figures.record("8 PostgreSQL down mid-scoring", **fig)


async def test_sqlite_locked_past_its_busy_timeout(
    game: Game,
    config: Config,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    """Another process holds SQLite's write lock for 6 s, past the 5 s busy timeout: every
    write in that window fails with "database is locked" and is retried."""
    path = str(config.sql_url).split("///", 1)[1]
    held = threading.Event()
    release = threading.Event()

    def hog() -> None:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("BEGIN EXCLUSIVE")
            held.set()
            release.wait(30)
            db.execute("ROLLBACK")
        finally:
            db.close()

    thread = threading.Thread(target=hog, daemon=True)

    async def lock() -> None:
        thread.start()
        await asyncio.to_thread(held.wait, 10)

    async def unlock() -> None:
        release.set()
        await asyncio.to_thread(thread.join, 10)

    fig = await _sql_outage(
        game, config, zygote, tmp_path / "w", pools, harness.size(400, 2_000), lock, unlock, 6.0
    )
    figures.record("8 SQLite locked mid-scoring", **fig)
