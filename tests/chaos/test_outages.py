"""Scenario 8: outages. Valkey down at start (the web answers 503 at once and recovers by
itself, a worker waits with backoff and recovers without a restart), and SQL unreachable
for 30 s under load, PostgreSQL restarted or SQLite locked (the workers wait, showing
"waiting", and resume within a second: nothing lost, dead, doubled or even failed). The 5 s Valkey
outage in the middle of a kill storm is in test_kill_storm.py."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from sqlalchemy import text

import echomq
from codemojex.config import Config
from codemojex.game import Game
from echomq.consumer.waits import pause
from echomq.server import EmbeddedValkey
from harness.helpers import free_port
from harness.pg import PgCluster
from tests.chaos import harness
from tests.chaos.conftest import make_config, worker_env
from tests.chaos.harness import Figures, Pool, Zygote

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


# The figure (a routine restart or failover, a backup's lock) at full size; 15 s by
# default, still twice what the retries of a failed attempt span before a guess would go dead
# (0.5 + 1 + 2 + 4 s), three times SQLite's busy timeout.
OUTAGE_S = 30.0 if harness.FULL else 15.0


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
    """The database goes away for ``down_s`` while guesses keep arriving. Nothing may be
    lost, dead-lettered, doubled or even counted as failed: each worker raises
    ``Unavailable``, hands its guesses back, shows ``waiting`` (admin view and its own
    /metrics) and claims nothing until the database answers, then resumes within a
    second."""
    players = await harness.new_players(game, max(10, n // 25))  # under the lane cap
    rng = random.Random()
    accepted = await harness.submit_many(game, players, n, rng)
    port = free_port()
    # Scoring takes 20 ms a guess here, so that the outage lands mid-stream.
    pool = Pool(zygote, log_dir, env=worker_env(config, CODEMOJEX_SCORE_DELAY_MS="20"))
    pools.append(pool)
    watched = pool.spawn(CODEMOJEX_METRICS_PORT=str(port))
    pool.spawn()

    async def counter(name: str) -> int:
        return int((await game.queue.stats())["counters"].get(name, 0))

    async def some_done() -> bool:
        return await counter("completed") >= n // 4

    await harness.wait_until(some_done, 30, "a quarter scored")
    # Guesses keep arriving during the outage: 10 a second (Valkey takes them; SQL is not
    # on the accept path).
    enough = asyncio.Event()
    arriving = asyncio.create_task(_keep_submitting(game, players, rng, accepted, enough))
    # Stopped on the way out whatever happens: a failure below must not leave it
    # submitting into a loop that is gone (its connections then warn in the next test).
    try:
        t = time.monotonic()
        await take_down()
        down_at = time.monotonic()

        async def both_waiting() -> bool:
            states = {w["worker_id"]: w["state"] for w in await game.workers()}
            return all(states.get(p.worker_id) == "waiting" for p in pool.procs)

        waiting_s = await harness.wait_until(both_waiting, 15, "both workers show waiting")
        gauge = await asyncio.to_thread(_state_gauge, port)
        claimed_then = await counter("claimed")
        await asyncio.sleep(max(0.0, down_s - (time.monotonic() - down_at)))
        claimed_while_waiting = await counter("claimed") - claimed_then
        waited_s = time.monotonic() - down_at - waiting_s
        completed_before = await counter("completed")
        await bring_back()
        back = time.monotonic()
        outage_s = back - t

        async def scoring_again() -> bool:
            return await counter("completed") > completed_before

        first_score_s = await harness.wait_until(
            scoring_again, 30, "a score after the outage", 0.01
        )

        async def none_waiting() -> bool:
            states = [w["state"] for w in await game.workers() if w["alive"]]
            return bool(states) and "waiting" not in states

        all_resumed_s = await harness.wait_until(none_waiting, 30, "no worker waiting", 0.02)
    finally:
        # Asked to stop between two batches, not cancelled: a cancel that lands mid-batch
        # leaves a guess Valkey took out of ``accepted`` (it happened: the drain below
        # then waited for a count it had already passed).
        enough.set()
        await asyncio.gather(asyncio.wait_for(arriving, 30), return_exceptions=True)

    async def drained() -> bool:
        return await counter("completed") == len(accepted)

    await harness.wait_until(drained, 90, "every guess scored after the outage")
    await pool.stop_all()
    stats = await game.queue.stats()
    verdict = await harness.verdict(game, accepted)
    fig = {
        "guesses": len(accepted),
        "during_outage": len(accepted) - n,
        "outage_s": round(outage_s, 1),
        "both_waiting_after_s": round(waiting_s, 2),
        "metrics_state_while_down": gauge,
        "claims_while_waiting": claimed_while_waiting,
        "waited_s": round(waited_s, 1),
        "first_score_after_back_s": round(first_score_s, 2),
        "all_resumed_after_back_s": round(all_resumed_s, 2),
        "failed_attempts": stats["counters"].get("failed", 0),
        "dead": stats["counters"].get("dead", 0),
        "worker_deaths": pool.self_died,
        **verdict,
    }
    assert watched in pool.procs
    assert gauge == "waiting", fig
    assert stats["counters"].get("failed", 0) == 0 and stats["counters"].get("dead", 0) == 0, fig
    assert pool.self_died == 0, fig
    # The ScoreWorker's probe is a write that touches no row, not a guess: nothing is
    # claimed while both wait but a claim already in flight as the wait began (a batch of
    # at most 32 per worker). Job probes claimed ~1.3 guesses a second per worker.
    assert claimed_while_waiting <= 64, fig
    assert first_score_s < 1.0 and all_resumed_s < 1.5, fig
    assert verdict == {
        "score_rows": len(accepted),
        "lost": 0,
        "doubled": 0,
        "strays": 0,
        "wrong_totals": 0,
    }, verdict
    return fig


async def _keep_submitting(
    game: Game,
    players: list[str],
    rng: random.Random,
    accepted: list[harness.Guess],
    enough: asyncio.Event,
) -> None:
    while not enough.is_set():
        accepted.extend(await harness.submit_many(game, players, 2, rng))
        await pause(0.2, enough)


def _state_gauge(port: int) -> str | None:
    """The state whose ``codemojex_worker_state`` sample is 1 on a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    for line in body.splitlines():
        if line.startswith("codemojex_worker_state{") and line.rstrip().endswith(" 1.0"):
            return line.split('state="', 1)[1].split('"', 1)[0]
    return None


@pytest.mark.postgres
async def test_postgres_restart_under_load(
    valkey: EmbeddedValkey,
    pg_cluster: PgCluster,
    pg_url: str,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    """``pg_ctl -m fast stop`` (sessions terminated), OUTAGE_S down, started again."""
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
            pg_cluster._run, "pg_ctl", "-D", str(pg_cluster.datadir), "-m", "fast", "-w", "stop"
        )

    async def start() -> None:
        await asyncio.to_thread(pg_cluster._pg_ctl_start)

    try:
        fig = await _sql_outage(
            game, config, zygote, tmp_path / "w", pools, harness.size(400, 2_000), stop, start,
            OUTAGE_S,
        )  # fmt: skip
    finally:
        await game.close()
    figures.record(f"8 PostgreSQL restart, {OUTAGE_S:.0f} s down under load", **fig)


async def test_sqlite_locked_under_load(
    game: Game,
    config: Config,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    """Another process holds SQLite's write lock (``BEGIN EXCLUSIVE``) for OUTAGE_S (15 s,
    three times the busy timeout; 30 s at full size), as a backup might: every write in that window ends "database is
    locked", and each guess waits rather than fails."""
    path = str(config.sql_url).split("///", 1)[1]
    held = threading.Event()
    release = threading.Event()

    def hog() -> None:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("BEGIN EXCLUSIVE")
            held.set()
            release.wait(120)
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
        game, config, zygote, tmp_path / "w", pools, harness.size(400, 2_000), lock, unlock,
        OUTAGE_S,
    )  # fmt: skip
    figures.record(f"8 SQLite locked {OUTAGE_S:.0f} s under load", **fig)
