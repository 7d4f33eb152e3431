"""``Admin``: the operator's actions on a game (the admin API): the queue's counters, the
durable floor of dead jobs (archived to SQL, retried, discarded), killing and adding workers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

import echomq
import echomq.admin
import echomq.ids
from codemojex import control, keys, store
from codemojex.errors import Conflict, JobNotFound
from codemojex.game import Game
from codemojex.views import DeadJobView, QueueCounters, QueueView

ARCHIVE_BATCH = 200
ARCHIVE_OVERLAP_MS = 1_000
# Dead jobs kept in Valkey (where an operator's retry finds them); older ones already on
# the durable floor leave it, so a long run of failures cannot fill Valkey's memory.
DEAD_KEPT = 10_000


class Admin:
    """Operator actions (admin API). Takes the Game it acts on."""

    def __init__(self, game: Game) -> None:
        self.game = game
        self.queues = game.queues
        self.conn = game.conn

    async def queue_view(self) -> QueueView:
        s = await self.queues.stats()
        c = s["counters"]
        counters: QueueCounters = {
            "accepted": c.get("enqueued", 0),
            "scored": c.get("completed", 0),
            "stale_refused": sum(s["refused"].values()),
            "reclaimed": c.get("reaped", 0),
            "failed": c.get("failed", 0),
            "dead": c.get("dead", 0),
            "retried": c.get("retried", 0),
            "released": c.get("released", 0),
        }
        lanes = sorted(s["lanes"].items(), key=lambda kv: -kv[1])
        return {
            "pending": s["pending"],
            "active": s["active"],
            "scheduled": s["scheduled"],
            "completed": s["completed"],
            "dead": s["dead"],
            "lanes": [{"lane": lane, "depth": d} for lane, d in lanes],
            "lane_count": s["lane_count"],
            "counters": counters,
        }

    async def archive_dead(self, batch: int = ARCHIVE_BATCH, keep: int = DEAD_KEPT) -> int:
        """Copy every dead job not yet on the durable floor into SQL, ``batch`` at a time;
        returns how many deaths this recorded. Then keep at most ``keep`` dead jobs in
        Valkey (split evenly over the partitions): the oldest of those already on the
        floor leave it (``_trim_dead``).

        A partition's sweep starts from the death time it reached last time (kept in
        Valkey, shared by every process; one cursor per partition, each on its own
        master's clock), less ``ARCHIVE_OVERLAP_MS``: a job that died in the same
        millisecond as the last one archived, after that sweep read the set, is not
        skipped. Recording is idempotent, so the overlap costs a few no-op upserts.
        """
        share = -(-keep // len(self.queues))
        moved = 0
        for queue in self.queues.partitions:
            moved += await self._archive_partition(queue, batch, share)
        return moved

    async def _archive_partition(self, queue: echomq.Queue, batch: int, keep: int) -> int:
        cursor = keys.floor_cursor(queue.name)
        raw = await self.conn.get(cursor)
        reached = int(raw) if raw is not None else 0
        since = max(0, reached - ARCHIVE_OVERLAP_MS)
        moved, offset = 0, 0
        while True:
            page = await queue.jobs.dead(limit=batch, since_ms=since, offset=offset)
            # Each death once: the same attempts is a no-op, a job that died again after a
            # retry (higher attempts) reopens its row. One transaction per page.
            moved += await store.upsert_dead_many(
                self.game.engine,
                [
                    store.Death(
                        job_id=info.job_id,
                        queue=queue.name,  # its partition: where a retry finds it
                        lane=info.lane,
                        payload=_json(info.payload),
                        error=info.error,
                        reason=info.reason,
                        attempts=info.attempts,
                        died_at_ms=info.finished_at_ms or 0,
                    )
                    for info in page
                ],
            )
            reached = max([reached, *(info.finished_at_ms or 0 for info in page)])
            if page:
                await self.conn.set(cursor, reached)
            if len(page) < batch:
                break
            offset += len(page)
        await self._trim_dead(queue, keep, safe_before_ms=reached - ARCHIVE_OVERLAP_MS)
        return moved

    async def _trim_dead(self, queue: echomq.Queue, keep: int, safe_before_ms: int) -> int:
        """Discard from ``queue`` the oldest dead jobs beyond ``keep``, only among those
        that died before ``safe_before_ms`` (on the durable floor for sure: a sweep
        recorded them, and the overlap of the next one is still after them). Their floor
        rows stay: the admin page lists them and may discard them; a retry answers 409,
        the queue no longer holds the job. Returns how many left."""
        excess = await echomq.admin.dead_count(queue) - keep
        if excess <= 0 or safe_before_ms <= 0:
            return 0
        ids = await echomq.admin.dead_before(queue, safe_before_ms, limit=min(excess, 1_000))
        trimmed = 0
        for first in range(0, len(ids), 50):  # a few connections at a time, not a thousand
            gone = await asyncio.gather(
                *(queue.jobs.discard(jid) for jid in ids[first : first + 50]),
                return_exceptions=True,
            )
            for outcome in gone:
                # retried or discarded meanwhile: not dead any more, nothing to trim
                if isinstance(outcome, (echomq.JobNotFound, echomq.InvalidState)):
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                trimmed += 1
        return trimmed

    async def _holder_of(self, job_id: str, queue_name: str) -> echomq.Queue | None:
        """The partition a floor row names; a row whose queue is no partition of this
        layout is looked for in every partition."""
        return self.queues.named(queue_name) or await self.queues.find(job_id)

    async def dead_jobs(self) -> list[DeadJobView]:
        await self.archive_dead()
        rows = await store.list_dead(self.game.engine)
        return [
            {
                "job_id": d.job_id,
                "lane": d.lane,
                "payload": _loads(d.payload),
                "error": d.error,
                "reason": d.reason,
                "attempts": d.attempts,
                "died_at": d.died_at_ms,
                "retried_at": d.retried_at_ms,
            }
            for d in rows
        ]

    async def retry_dead(self, job_id: str) -> None:
        row = await store.get_dead(self.game.engine, job_id)
        if row is None or row.discarded:
            raise JobNotFound("no such dead job")
        if row.retried_at_ms is not None:
            raise Conflict("that dead job was already retried")
        queue = await self._holder_of(job_id, row.queue)
        try:
            if queue is None:
                raise echomq.JobNotFound(job_id)
            await queue.jobs.retry_dead(job_id)
        except echomq.JobNotFound:
            raise Conflict("the job is no longer held by the queue") from None
        except echomq.InvalidState:
            raise Conflict("the job is not dead any more") from None
        await store.mark_dead_retried(self.game.engine, job_id, await queue.server_time_ms())

    async def discard_dead(self, job_id: str) -> None:
        row = await store.get_dead(self.game.engine, job_id)
        if row is None or not await store.delete_dead(self.game.engine, job_id):
            raise JobNotFound("no such dead job")
        queue = await self._holder_of(job_id, row.queue)
        try:
            if queue is not None:
                await queue.jobs.discard(job_id)
        except (echomq.JobNotFound, echomq.InvalidState):
            pass  # already gone from Valkey (or retried meanwhile): the floor row is what counts

    async def kill_worker(self, worker_id: str) -> None:
        workers = {w["worker_id"]: w for w in await self.game.workers()}
        w = workers.get(worker_id)
        if w is None:
            raise JobNotFound("no such worker")
        if not w["alive"]:
            raise Conflict(f"{worker_id} is already dead")
        await control.order_kill(self.conn, worker_id)

    async def add_worker(self) -> str:
        sid = await control.live_supervisor(self.conn)
        if sid is None:
            raise Conflict("no supervisor runs here: start workers with `codemojex up`")
        worker_id = echomq.ids.worker_id()
        await control.order_spawn(self.conn, sid, worker_id)
        return worker_id


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _loads(raw: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
