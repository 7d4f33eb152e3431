"""``Queue``: one named queue on one connection; every key lives under ``emq:{name}:``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import checks
from .coalesce import Coalescer
from .codec import text
from .errors import NotReplicated
from .events import Events
from .hooks import Hooks, checked, enqueue_headers
from .jobs import Jobs
from .keys import Keys
from .lanes import Lanes
from .schedules import Schedules
from .scripts import SCRIPTS, Arg, Runner, Script
from .settings import Settings
from .stalled import Stalled
from .types import QueueStats, WorkerInfo


class Queue:
    """A reliable queue. ``conn`` is a ``redis.asyncio.Redis`` (or ``RedisCluster``).

    Args:
        conn: the client every call of this queue object goes through.
        name: the queue's name; its keys live under ``emq:{name}:``.
        settings: retention, backoff and replication knobs (:class:`~echomq.Settings`).
        hooks: :class:`~echomq.Hooks` used by every enqueue through this object and by
            every consumer of it (see :mod:`echomq.hooks`); more with :meth:`add_hooks`.
    """

    def __init__(
        self,
        conn: Any,
        name: str,
        settings: Settings | None = None,
        *,
        hooks: Iterable[Hooks] | None = None,
    ) -> None:
        checks.name("queue name", name)
        if "{" in name or "}" in name:
            raise ValueError("queue name must be non-empty and free of braces")
        self.conn = conn
        self.name = name
        self.settings = settings or Settings()
        self.hooks: tuple[Hooks, ...] = checked(hooks)
        self.keys = Keys(name)
        self.runner = Runner(conn, self.keys.fence)
        # Enqueues made while another is in flight share its successor's round trip.
        self.coalescer = Coalescer(self.runner)
        self.jobs = Jobs(self)
        self.lanes = Lanes(self)
        self.stalled = Stalled(self)
        self.schedules = Schedules(self)
        self.events = Events(self)

    def using(self, conn: Any) -> Queue:
        """The same queue, settings and hooks on another connection."""
        return Queue(conn, self.name, self.settings, hooks=self.hooks)

    def add_hooks(self, *hooks: Hooks) -> None:
        """Use ``hooks`` too, after those given: in enqueues and consumers started from now on."""
        self.hooks = (*self.hooks, *checked(hooks))

    def enqueue_headers(self, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """``headers`` after every hook's ``on_enqueue``."""
        return enqueue_headers(self.hooks, headers) if self.hooks else headers

    async def enqueue_call(
        self, script: Script, keys: Sequence[str], args: Sequence[Arg]
    ) -> tuple[Any, int]:
        """Run an enqueue script: ``(reply, replicas that confirmed it)``. With
        ``settings.replicas`` the call also waits (``WAIT``) for that many replicas, at most
        ``settings.replica_timeout_ms``; without, it sends nothing more and reports 0."""
        wanted = self.settings.replicas
        if not wanted:
            return await self.coalescer.run(script, keys, args), 0
        return await self.runner.run_replicated(
            script,
            keys,
            args,
            mark=self.keys.replicated,
            replicas=wanted,
            timeout_ms=self.settings.replica_timeout_ms,
        )

    def confirm(self, job_id: str, acked: int) -> None:
        """Raise :class:`NotReplicated` unless ``settings.replicas`` confirmed ``job_id``."""
        if acked < self.settings.replicas:
            raise NotReplicated(job_id, acked, self.settings.replicas)

    async def stats(self, max_lanes: int = 1000) -> QueueStats:
        """One snapshot (:class:`echomq.types.QueueStats`); ``lanes`` lists the first
        ``max_lanes`` non-empty lanes, served next first. Costs O(``max_lanes``)."""
        checks.integer("max_lanes", max_lanes, at_least=0)
        r = await self.runner.run(SCRIPTS["stats"], self.keys.script_keys("stats"), [max_lanes])
        lanes = {text(r[5][i]): int(r[5][i + 1]) for i in range(0, len(r[5]), 2)}
        counters = {text(r[6][i]): int(r[6][i + 1]) for i in range(0, len(r[6]), 2)}
        refused = {text(r[7][i]): int(r[7][i + 1]) for i in range(0, len(r[7]), 2)}
        return {
            "pending": int(r[0]),
            "active": int(r[1]),
            "scheduled": int(r[2]),
            "completed": int(r[3]),
            "dead": int(r[4]),
            "lanes": lanes,
            "counters": counters,
            "refused": refused,
            "server_now_ms": int(r[8]),
            "lane_count": int(r[9]),
            "paused": bool(int(r[10])),
        }

    async def pause(self) -> bool:
        """Stop claims handing out jobs (plain and lanes, batches too) until :meth:`resume`;
        enqueues still land, due jobs wait. Parked consumers stay parked, sending nothing
        more than idle ones do. True when this call paused the queue."""
        r = await self.runner.run(SCRIPTS["pause"], self.keys.script_keys("pause"), [])
        return bool(int(r))

    async def resume(self) -> bool:
        """Let claims hand out jobs again and wake the parked consumers (within one wake).
        True when the queue was paused."""
        r = await self.runner.run(SCRIPTS["resume"], self.keys.script_keys("resume"), [])
        return bool(int(r))

    async def promote(self, limit: int = 100) -> int:
        """Move due scheduled jobs back to their lanes now; returns how many moved."""
        checks.integer("limit", limit, at_least=1)
        r = await self.runner.run(SCRIPTS["promote"], self.keys.script_keys("promote"), [limit])
        return int(r[0])

    async def heartbeat(
        self,
        worker_id: str,
        lapse_ms: int,
        meta: dict[str, Any] | None = None,
        ttl_ms: int = 3_600_000,
        *,
        idle_lapse_ms: int | None = None,
    ) -> int:
        """Register ``worker_id`` as alive until server now + ``lapse_ms`` (+
        ``idle_lapse_ms`` instead while it holds no job); returns server now."""
        now, _ = await self.beat(worker_id, lapse_ms, meta, ttl_ms, idle_lapse_ms=idle_lapse_ms)
        return now

    async def beat(
        self,
        worker_id: str,
        lapse_ms: int,
        meta: dict[str, Any] | None = None,
        ttl_ms: int = 3_600_000,
        *,
        idle_lapse_ms: int | None = None,
        gap_ms: int = 0,
    ) -> tuple[int, int]:
        """``heartbeat``, returning ``(server now, the lapse applied)``; ``gap_ms`` > 0 joins
        the queue's pulse (``Stalled.sweep``)."""
        checks.name("worker_id", worker_id)
        checks.integer("gap_ms", gap_ms, at_least=0)
        checks.integer("lapse_ms", lapse_ms, at_least=1)
        checks.integer("ttl_ms", ttl_ms, at_least=1)
        checks.optional_integer("idle_lapse_ms", idle_lapse_ms, at_least=lapse_ms)
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
        flat: list[Any] = []
        for k, v in (meta or {}).items():
            flat += [checks.name("meta key", k), "" if v is None else str(v)]
        now, applied = await self.runner.run(
            SCRIPTS["heartbeat"],
            self.keys.script_keys(
                "heartbeat", self.keys.worker(worker_id), self.keys.worker_jobs(worker_id)
            ),
            [
                worker_id,
                lapse_ms,
                ttl_ms,
                idle_lapse_ms or lapse_ms,
                gap_ms,
                self.settings.events_maxlen,
                *flat,
            ],
        )
        return int(now), int(applied)

    async def unregister(self, worker_id: str) -> bool:
        """Leave the registry (a clean stop); frees the reaper lock if this worker held it."""
        checks.name("worker_id", worker_id)
        return bool(
            await self.runner.run(
                SCRIPTS["unregister"],
                self.keys.script_keys("unregister", self.keys.worker(worker_id)),
                [worker_id],
            )
        )

    async def workers(self) -> list[WorkerInfo]:
        """Registered workers with their heartbeat deadline (alive = registered)."""
        rows = await self.conn.zrange(self.keys.workers, 0, -1, withscores=True)
        pipe = self.conn.pipeline(transaction=False)
        for wid, _ in rows:
            pipe.hgetall(self.keys.worker(text(wid)))
        metas = await pipe.execute() if rows else []
        return [
            WorkerInfo.from_row(text(wid), int(score), meta)
            for (wid, score), meta in zip(rows, metas, strict=True)
        ]

    async def server_time_ms(self) -> int:
        secs, micros = await self.conn.time()
        return int(secs) * 1000 + int(micros) // 1000
