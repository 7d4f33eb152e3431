"""The game on a partitioned guesses queue (``--partitions 3``), on one Valkey: players'
lanes spread over the partitions, real ``codemojex worker`` processes claim from all of
them, a worker killed mid-score leaves its jobs to be reaped on their own partition and
scored once, and the reads (a guess, a player's guesses, the admin's queue and dead jobs)
find each job where it lives. The same game on a 3-master cluster is in
``tests/distributed/test_many_processes.py``."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

import echomq
from codemojex import keys, layout
from codemojex.admin import Admin
from codemojex.config import Config
from codemojex.errors import JobNotFound, NotYourGuess, Unavailable
from codemojex.game import Game
from codemojex.store.models import ScoreRow
from echomq.partitions import partition_of
from tests.game.test_exactly_once import new_players, wait_until

ROOT = Path(__file__).parents[2]
PARTITIONS = 3


@pytest.fixture
async def pgame(config: Config) -> AsyncIterator[Game]:
    g = Game.connect(config.with_(partitions=PARTITIONS))
    await g.conn.flushall()  # a private server: nothing else lives here
    try:
        yield g
    finally:
        await g.close()


def _spawn_worker(config: Config, worker_id: str, score_delay_ms: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        CODEMOJEX_VALKEY_URL=config.valkey_url or "",
        CODEMOJEX_DATABASE_URL=config.sql_url,
        CODEMOJEX_LAPSE_MS="500",
        CODEMOJEX_REAP_INTERVAL_MS="200",
        CODEMOJEX_LEASE_MS="2000",
        CODEMOJEX_SCORE_DELAY_MS=str(score_delay_ms),
        CODEMOJEX_PARTITIONS=str(PARTITIONS),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "codemojex", "worker", "--worker-id", worker_id],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def _scores(game: Game) -> collections.Counter[str]:
    async with game.engine.connect() as conn:
        rows = (await conn.execute(select(ScoreRow.job_id))).scalars().all()
    return collections.Counter(rows)


async def test_guesses_spread_over_partitions_and_a_killed_worker_costs_nothing(
    pgame: Game, config: Config, workers: list[subprocess.Popen[bytes]]
) -> None:
    players = await new_players(pgame, 30)
    rnd, _ = await pgame.current_round()
    jobs = []
    for _ in range(4):
        jobs += [
            (await pgame.submit(p, rnd.round_id, list(rnd.secret[::-1]))).job_id for p in players
        ]
    stats = await pgame.queues.stats()
    assert stats["pending"] == 120
    assert [p["pending"] for p in stats["partitions"]] == [
        4 * sum(partition_of(p, PARTITIONS) == i for p in players) for i in range(PARTITIONS)
    ]
    assert all(p["pending"] > 0 for p in stats["partitions"])

    # Slow scoring, so the first worker surely dies holding jobs of several partitions.
    workers.append(_spawn_worker(config, "WRK_doomed", score_delay_ms=300))

    async def holding() -> bool:
        return (await pgame.queues.stats())["active"] >= 6

    await wait_until(holding)
    workers[0].kill()
    workers.append(_spawn_worker(config, "WRK_rescuer", score_delay_ms=0))

    async def all_scored() -> bool:
        return len(await _scores(pgame)) == len(jobs)

    await wait_until(all_scored, timeout=40)
    scores = await _scores(pgame)
    assert set(scores) == set(jobs) and set(scores.values()) == {1}  # each once
    stats = await pgame.queues.stats()
    assert stats["counters"]["completed"] == len(jobs)
    assert stats["counters"]["reaped"] >= 1  # the doomed worker's jobs came back
    reaped_on = [p["counters"].get("reaped", 0) for p in stats["partitions"]]
    assert sum(reaped_on) == stats["counters"]["reaped"]
    # The rescuer claimed on every partition: it is registered on each.
    for queue in pgame.queues.partitions:
        assert "WRK_rescuer" in [w.worker_id for w in await queue.workers()]
    view = await Admin(pgame).queue_view()
    assert view["counters"]["scored"] == len(jobs) and view["pending"] == 0
    assert any(w["worker_id"] == "WRK_rescuer" and w["alive"] for w in await pgame.workers())


async def test_a_guess_is_found_on_its_partition_and_only_by_its_owner(pgame: Game) -> None:
    # Two players on different partitions.
    players = await new_players(pgame, 12)
    a = players[0]
    b = next(p for p in players if partition_of(p, PARTITIONS) != partition_of(a, PARTITIONS))
    rnd, _ = await pgame.current_round()
    acc = await pgame.submit(a, rnd.round_id, list(rnd.secret))
    assert (await pgame.queue_of(a).jobs.get(acc.job_id)) is not None
    assert (await pgame.queue_of(b).jobs.get(acc.job_id)) is None
    view = await pgame.guess_view(a, acc.job_id)
    assert view["state"] == "pending" and view["seq"] == acc.seq
    with pytest.raises(NotYourGuess):
        await pgame.guess_view(b, acc.job_id)
    with pytest.raises(JobNotFound):
        await pgame.guess_view(a, "JOB_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert [g["job_id"] for g in await pgame.guesses_of(a, rnd.round_id)] == [acc.job_id]
    assert await pgame.guesses_of(b, rnd.round_id) == []
    with pytest.raises(RuntimeError, match="partitions"):
        _ = pgame.queue  # no one queue to reach into


async def test_dead_jobs_are_archived_and_retried_on_their_own_partition(pgame: Game) -> None:
    players = await new_players(pgame, 9)
    rnd, _ = await pgame.current_round()
    # Guesses that die at their first failure (the game's own allow five, with backoff).
    jobs = [
        await pgame.queues.enqueue(
            p, {"player_id": p, "round_id": rnd.round_id, "guess": []}, max_attempts=1
        )
        for p in players
    ]

    async def poison(claim: echomq.Claim) -> None:
        raise RuntimeError("poisoned")

    consumer = echomq.PartitionedConsumer(pgame.queues, poison, concurrency=3, source="lanes")
    task = asyncio.create_task(consumer.run())

    async def all_dead() -> bool:
        return (await pgame.queues.stats())["dead"] == len(jobs)

    try:
        await wait_until(all_dead)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
    admin = Admin(pgame)
    assert await admin.archive_dead() == len(jobs)
    rows = {d["job_id"]: d for d in await admin.dead_jobs()}
    assert set(rows) == set(jobs)
    for q in pgame.queues.partitions:  # one floor cursor per partition, each moved
        if (await q.stats())["dead"]:
            assert await pgame.conn.get(keys.floor_cursor(q.name)) is not None
    victim = jobs[-1]
    await admin.retry_dead(victim)
    owner = players[-1]
    info = await pgame.queue_of(owner).jobs.get(victim)
    assert info is not None and info.state == "pending"
    await admin.discard_dead(jobs[0])
    assert await pgame.queues.get(jobs[0]) is None
    assert (await pgame.queues.stats())["dead"] == len(jobs) - 2


async def test_processes_of_another_layout_are_refused(pgame: Game, config: Config) -> None:
    await pgame.agree_on_layout()  # records 3
    assert await pgame.conn.get(keys.LAYOUT) == b"3"
    other = Game.connect(config)  # --partitions 1 against a game of 3
    try:
        with pytest.raises(layout.LayoutMismatch, match="CODEMOJEX_PARTITIONS=3"):
            await other.agree_on_layout()
        players = await new_players(other, 1)
        rnd, _ = await other.current_round()
        with pytest.raises(Unavailable):  # a web process that started while Valkey was down
            await other.submit(players[0], rnd.round_id, list(rnd.secret))
        assert (await pgame.queues.stats())["pending"] == 0  # nothing stranded
    finally:
        await other.close()
    # Real worker and web processes of the wrong layout say why in one line and stop.
    for role in ("worker", "web"):
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "codemojex", role, "--partitions", "2"],
            env=dict(
                os.environ,
                CODEMOJEX_VALKEY_URL=config.valkey_url or "",
                CODEMOJEX_DATABASE_URL=config.sql_url,
                CODEMOJEX_DATA_DIR=str(config.data_dir),
                CODEMOJEX_PORT="1",  # never reached: it stops before it listens
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2, (role, proc.stderr)
        assert "has 3 partition(s)" in proc.stderr and "--partitions 2" in proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
