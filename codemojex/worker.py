"""One ScoreWorker process: the guesses consumer, the rounds consumer (round closes and
the periodic sweep's ticks) and the kill-order listener, until SIGTERM (clean stop) or a
kill order (SIGKILL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from sqlalchemy.exc import SQLAlchemyError

import echomq
import echomq.errors
import echomq.ids
from codemojex import control, crashpoints, keys, rounds, store, tracing
from codemojex.admin import Admin
from codemojex.config import Config
from codemojex.game import Game
from codemojex.metrics import WorkerMetrics
from codemojex.score_worker import ScoreWorker
from echomq.backoff import Backoff
from echomq.connection import connect_sync

log = logging.getLogger("codemojex.worker")


async def _until_ready(game: Game) -> None:
    """Valkey or SQL may be down at start (``rounds.ensure`` needs both): retry with
    backoff instead of dying."""
    backoff = Backoff(first=0.1, cap=5.0, jitter=False)
    while True:
        try:
            await game.rounds.ensure()
            await game.agree_on_layout()  # LayoutMismatch: a configuration error, not retried
            await game.rounds.schedule_sweep()
            return
        except (*echomq.errors.TRANSIENT, redis.RedisError, SQLAlchemyError) as e:
            delay = backoff.next_delay()
            log.warning(
                "valkey or sql unavailable (%s: %s); retrying in %.1fs", type(e).__name__, e, delay
            )
            await asyncio.sleep(delay)


async def _listen_for_kill(url: str, worker_id: str, consumer: echomq.PartitionedConsumer) -> None:
    """Block on this worker's kill key; a kill order SIGKILLs the process on the spot,
    after noting which jobs it dies holding (the admin page and ``mash`` check that each
    of them is scored by another worker)."""
    conn = echomq.connect(url, socket_timeout=None)
    note = connect_sync(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        while True:
            try:
                if await conn.blpop([keys.kill_key(worker_id)], timeout=0):
                    holding = [c.job_id for c in consumer.running]
                    with contextlib.suppress(redis.RedisError, OSError):
                        control.record_killed_sync(note, worker_id, holding)
                    log.warning(
                        "kill order: dying now, scoring %s",
                        ",".join(holding) or "nothing",
                        extra={"worker_id": worker_id, "job_id": holding[0] if holding else None},
                    )
                    os.kill(os.getpid(), signal.SIGKILL)
            except echomq.errors.TRANSIENT:
                await asyncio.sleep(1)
    finally:
        note.close()
        await conn.aclose()


HEALTH_INTERVAL_S = 2.0


async def _keep_health_file(game: Game, path: Path) -> None:
    """Touch ``path`` while this worker's loop runs and Valkey answers it: a frozen loop or
    a lost server lets the file age, which is what a health check looks at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            async with asyncio.timeout(HEALTH_INTERVAL_S):
                await game.conn.ping()
        except Exception as e:  # noqa: BLE001 - unhealthy now; the file says so by ageing
            log.debug("health: valkey did not answer: %s", e)
        else:
            path.write_text(f"{time.time():.3f}\n")
        await asyncio.sleep(HEALTH_INTERVAL_S)


def round_jobs(game: Game) -> echomq.Handler:
    """The rounds consumer's handler: a sweep tick (``rounds.is_sweep``) makes sure a
    round is current (opening the next one if it is missing) and archives dead jobs to
    the durable floor; any other job is a round's close."""
    admin = Admin(game)

    async def handle(claim: echomq.Claim) -> dict[str, Any]:
        if not rounds.is_sweep(claim.payload):
            return await game.rounds.handle_close(claim)
        try:
            current = await game.rounds.ensure()
            archived = await admin.archive_dead()
        except Exception as e:  # noqa: BLE001 - a sweep that fails now runs again next tick
            log.warning("round/floor sweep failed: %s", e)
            return {"swept": False}
        # No "closed"/"opened" here: the hub announces rotations, which a sweep is not.
        return {"swept": True, "round_id": current.round_id, "archived": archived}

    return handle


def _fault_hooks() -> list[echomq.Hooks]:
    """Tests only (``CODEMOJEX_TEST_CRASH=mid_extend:p``): a hook after each lease
    renewal, so the worker may die after the extend reached the server and before the
    consumer acts on the answer. EchoMQ knows nothing of crash points; its
    ``after_extend`` hook is the seam. Unarmed: no hook at all."""
    if not crashpoints.armed("mid_extend"):
        return []

    def mid_extend(claims: Sequence[echomq.Claim], verdicts: Sequence[bool]) -> None:
        crashpoints.maybe_crash("mid_extend")

    return [echomq.Hooks(after_extend=mid_extend)]


async def run_worker(config: Config, worker_id: str | None = None) -> None:
    worker_id = worker_id or os.environ.get("CODEMOJEX_WORKER_ID") or echomq.ids.worker_id()
    tracing.configure("codemojex-worker")  # off unless OTEL_* ask (docs/observability.md)
    game = Game.connect(config)
    for partition in game.queues.partitions:
        tracing.trace_completions(partition)
    scorer = ScoreWorker(
        game.engine,
        game.rounds,
        worker_id,
        config.score_delay_ms,
        group=store.GroupCommit(game.engine, linger_ms=config.commit_linger_ms),
    )
    meters = WorkerMetrics(worker_id)
    # One consumer per partition under this one worker id, the handlers split among them;
    # with one partition, exactly the plain consumer of the "guesses" queue.
    guesses = echomq.PartitionedConsumer(
        game.queues,
        tracing.traced(meters.timed(scorer.handle), worker_id=worker_id, lease_ms=config.lease_ms),
        lease_ms=config.lease_ms,
        concurrency=config.concurrency,
        prefetch=config.prefetch,
        worker_id=worker_id,
        source="lanes",  # --fifo puts every guess on one lane: FIFO
        lapse_ms=config.lapse_ms,
        reap_interval_ms=config.reap_interval_ms,
        meta=scorer.meta,
        # A guess whose scoring hangs is failed and retried, not held for ever; a database
        # that cannot be reached makes the handler raise Unavailable (see ScoreWorker).
        timeout_ms=config.score_timeout_ms or None,
        # The database itself, not a guess, says when it is back; that probe is one
        # statement touching no row, so twice a second per worker costs it nothing, and
        # a guess is scored within a second of the database's return.
        probe=scorer.probe,
        probe_max_ms=500,
        hooks=_fault_hooks(),
    )
    round_consumer = echomq.Consumer(
        game.rounds.queue,
        round_jobs(game),
        lease_ms=10_000,
        # A sweep held up by a slow database must not hold up a round's close behind it.
        concurrency=2,
        source="jobs",
        worker_id=f"{worker_id}-rounds",
        lapse_ms=config.lapse_ms,
        reap_interval_ms=config.reap_interval_ms,
    )
    assert config.valkey_url
    meters.watch(guesses, scorer)
    if config.metrics_port:
        meters.serve(config.metrics_port, config.metrics_host, config.metrics_token)
    tasks: list[asyncio.Task[None]] = []
    try:
        await _until_ready(game)
        with contextlib.suppress(*echomq.errors.TRANSIENT):
            await control.remember_worker(game.conn, worker_id)
        tasks = [
            asyncio.create_task(_listen_for_kill(config.valkey_url, worker_id, guesses)),
            asyncio.create_task(round_consumer.run()),
        ]
        if config.health_file:
            tasks.append(asyncio.create_task(_keep_health_file(game, Path(config.health_file))))
        loop = asyncio.get_running_loop()

        def stop_both() -> None:
            guesses.stop()
            round_consumer.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_both)
        log.info(
            "worker %s (pid %d) scoring", worker_id, os.getpid(), extra={"worker_id": worker_id}
        )
        await guesses.run()
    finally:
        round_consumer.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await scorer.close()  # scores in flight commit before the engine goes
        await game.close()
        meters.close()
