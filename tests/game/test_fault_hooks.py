"""The ``mid_extend`` crash point rides on EchoMQ's ``after_extend`` hook (no method of the
queue is replaced): armed, a worker dies right after a lease renewal reached the server,
and its guess is still scored exactly once by another worker."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from codemojex import crashpoints
from codemojex.config import Config
from codemojex.game import Game
from codemojex.worker import _fault_hooks
from tests.game.test_exactly_once import count_scores, new_players, rescue_until_completed

ROOT = Path(__file__).parents[2]


def test_unarmed_the_worker_adds_no_hook() -> None:
    assert not crashpoints.armed("mid_extend")
    assert _fault_hooks() == []


async def test_a_worker_dies_mid_extend_and_its_guess_is_scored_once(
    game: Game, config: Config, tmp_path: Path
) -> None:
    (player,) = await new_players(game, 1)
    rnd, _ = await game.current_round()
    acc = await game.submit(player, rnd.round_id, list(rnd.secret))
    env = dict(
        os.environ,
        CODEMOJEX_TEST_CRASH="mid_extend:1.0",
        CODEMOJEX_VALKEY_URL=config.valkey_url or "",
        CODEMOJEX_DATABASE_URL=config.sql_url,
        CODEMOJEX_LAPSE_MS="500",
        CODEMOJEX_LEASE_MS="600",  # a renewal every 200 ms, while the score takes 5 s
        CODEMOJEX_SCORE_DELAY_MS="5000",
        CODEMOJEX_WORKER_ID="WRK_midextend",
    )
    err = tmp_path / "worker.err"
    main = (
        "import asyncio; from codemojex.config import Config; "
        "from codemojex.worker import run_worker; asyncio.run(run_worker(Config.from_env()))"
    )
    stderr = err.open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once; the wait runs in a thread
        [sys.executable, "-c", main], env=env, cwd=ROOT, stderr=stderr
    )
    try:
        assert await asyncio.to_thread(proc.wait, 30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
        stderr.close()
    assert f"crashpoint mid_extend kill pid {proc.pid}" in err.read_text()
    info = await game.queue.jobs.get(acc.job_id)
    assert info is not None and info.state == "active"  # it died holding the job
    assert await count_scores(game, acc.job_id) == 0

    await rescue_until_completed(game, config, acc.job_id)
    assert await count_scores(game, acc.job_id) == 1
