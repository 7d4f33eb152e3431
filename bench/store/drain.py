"""A backlog drained by ScoreWorker processes on each backend: guesses scored a second and
the processes' CPU."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from bench.common import ROOT, server_cpu_seconds
from bench.store.backend import PLAYERS, cluster_cpu_seconds
from codemojex import rules
from codemojex.store import (
    migrate_async,
)

# --- the whole worker: drain accepted guesses at several handler concurrencies ----------------


@dataclass
class Drain:
    backend: str
    concurrency: int
    rows: int
    seconds: float
    worker_cpu_s: float
    valkey_cpu_s: float
    sql_cpu_s: float | None  # PostgreSQL server processes, when the cluster is ours

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def proc_cpu_seconds(pids: Sequence[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


async def drain(
    backend: str,
    sql_url: str,
    valkey_url: str,
    rows: int,
    concurrencies: Sequence[int],
    procs: int,
    progress: Progress,
    sql_pid: int | None = None,
) -> list[Drain]:
    from codemojex.config import Config
    from codemojex.game import Game

    await migrate_async(sql_url)
    config = Config(valkey_url=valkey_url, database_url=sql_url, round_seconds=3600)
    if hasattr(config, "guess_rate"):  # bulk acceptance: no per-player submission throttle
        config = config.with_(guess_rate=0)
    game = Game.connect(config)
    out: list[Drain] = []
    try:
        players = [(await game.create_player(f"b{i}")).player_id for i in range(PLAYERS)]
        rnd, _ = await game.current_round()
        task = progress.add_task(f"{backend} worker drain", total=rows * len(concurrencies))
        for c in concurrencies:
            # Accept the guesses first (a few solves among misses), then let the workers go.
            for i in range(rows):
                guess = list(rnd.secret) if i % 9 == 0 else [rules.DEFAULT_PALETTE[i % 8]] * 4
                await game.submit(players[i % PLAYERS], rnd.round_id, guess)
            out.append(
                await _drain_once(backend, config, game, rows, c, procs, progress, task, sql_pid)
            )
    finally:
        await game.close()
    return out


async def _drain_once(
    backend: str,
    config: Any,
    game: Any,
    rows: int,
    concurrency: int,
    procs: int,
    progress: Progress,
    task: Any,
    sql_pid: int | None = None,
) -> Drain:
    async def completed() -> int:
        return int((await game.queue.stats())["counters"].get("completed", 0))

    base = await completed()
    env = dict(
        os.environ, CODEMOJEX_VALKEY_URL=config.valkey_url,
        CODEMOJEX_DATABASE_URL=config.database_url, CODEMOJEX_CONCURRENCY=str(concurrency),
    )  # fmt: skip
    workers = [
        subprocess.Popen([sys.executable, "-m", "codemojex", "worker"], env=env, cwd=ROOT,  # noqa: ASYNC220
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(procs)
    ]  # fmt: skip
    pids = [w.pid for w in workers]
    try:
        done = 0
        while done == 0:  # start-up (imports, connections) is not the work measured
            await asyncio.sleep(0.005)
            done = await completed() - base
        t0, cpu0, first = time.perf_counter(), proc_cpu_seconds(pids), done
        valkey0, sql0 = await server_cpu_seconds(game.conn), cluster_cpu_seconds(sql_pid)
        while done < rows:
            await asyncio.sleep(0.02)
            done = await completed() - base
            progress.update(task, completed=progress.tasks[task].completed)
        seconds, cpu = time.perf_counter() - t0, proc_cpu_seconds(pids) - cpu0
        valkey = await server_cpu_seconds(game.conn) - valkey0
        sql1 = cluster_cpu_seconds(sql_pid)
        sql = sql1 - sql0 if sql0 is not None and sql1 is not None else None
        progress.advance(task, rows)
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    return Drain(backend, concurrency, rows - first, seconds, cpu, valkey, sql)
