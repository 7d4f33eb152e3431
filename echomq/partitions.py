"""``Partitioned``: one logical queue over N queues, ``emq:{name:0…}:`` … ``emq:{name:N-1…}:``."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from typing import Any

from redis.crc import key_slot

from . import checks
from .consumer import Consumer, Handler
from .consumer.outcomes import Counts
from .ids import worker_id as mint_worker_id
from .queue import Queue
from .settings import Settings
from .types import Claim, Enqueued, JobInfo, QueueStats, WorkerInfo


class PartitionedStats(QueueStats):
    """``Partitioned.stats()``: the partitions' :class:`QueueStats` summed, and each one."""

    partitions: list[QueueStats]


SLOTS = 16384  # a Valkey Cluster's hash slots


def partition_names(name: str, partitions: int) -> list[str]:
    """The queue names of ``name``'s partitions: ``[name]`` alone, else one per partition,
    ``name:i`` or ``name:i.k`` (:func:`spread_name`), whose slots spread evenly."""
    if partitions == 1:
        return [name]
    return [spread_name(name, i, partitions) for i in range(partitions)]


def spread_name(name: str, i: int, partitions: int) -> str:
    """Partition ``i``'s queue name: ``name:i``, or ``name:i.k`` with the smallest ``k``,
    whose hash slot lies in the middle half of the ``i``-th of ``partitions`` equal slot
    ranges: one partition per master (docs/api/partitions.md says why)."""
    width = SLOTS / partitions
    low, high = (i + 0.25) * width, (i + 0.75) * width
    for k in range(100_000):
        candidate = f"{name}:{i}" if k == 0 else f"{name}:{i}.{k}"
        if low <= key_slot(candidate.encode("utf-8", "surrogatepass")) < high:
            return candidate
    raise ValueError(f"no name for partition {i} of {partitions} of {name!r}")  # pragma: no cover


def beat_of(row: Mapping[str, str]) -> int:
    """The server time of a worker row's last beat; -1 where it has none (or not a number)."""
    raw = row.get("beat", "")
    return int(raw) if raw.isdigit() else -1


def partition_of(lane: str, partitions: int) -> int:
    """The partition of ``lane``: CRC-32 of its UTF-8 bytes modulo ``partitions``, the same
    in every process and every Python (``hash()`` is salted per process)."""
    return zlib.crc32(lane.encode("utf-8", "surrogatepass")) % partitions


class Partitioned:
    """A logical queue ``name`` over ``partitions`` queues named ``name:0`` … on ``conn``."""

    def __init__(
        self, conn: Any, name: str, partitions: int, settings: Settings | None = None
    ) -> None:
        checks.integer("partitions", partitions, at_least=1)
        self.conn = conn
        self.name = name
        self.settings = settings or Settings()
        self.partitions = [Queue(conn, q, self.settings) for q in partition_names(name, partitions)]
        self._by_name = {q.name: q for q in self.partitions}

    def __len__(self) -> int:
        return len(self.partitions)

    def named(self, queue_name: str) -> Queue | None:
        """The partition called ``queue_name`` (a ``Queue.name`` kept with a job), or None."""
        return self._by_name.get(queue_name)

    def of_lane(self, lane: str) -> Queue:
        """The partition of ``lane`` (the queue's every call on that lane goes there)."""
        checks.name("lane", lane)
        if len(self.partitions) == 1:
            return self.partitions[0]
        return self.partitions[partition_of(lane, len(self.partitions))]

    async def submit(self, lane: str, payload: Any, **kwargs: Any) -> Enqueued:
        """``Lanes.submit`` on the lane's partition (same arguments, same errors)."""
        return await self.of_lane(lane).lanes.submit(lane, payload, **kwargs)

    async def enqueue(self, lane: str, payload: Any, **kwargs: Any) -> str:
        """``Lanes.enqueue`` on the lane's partition."""
        return await self.of_lane(lane).lanes.enqueue(lane, payload, **kwargs)

    async def find(self, job_id: str) -> Queue | None:
        """The partition holding ``job_id``'s row, or None."""
        checks.name("job_id", job_id)
        found = await asyncio.gather(*(q.conn.exists(q.keys.job(job_id)) for q in self.partitions))
        return next((q for q, n in zip(self.partitions, found, strict=True) if n), None)

    async def get(self, job_id: str) -> JobInfo | None:
        q = await self.find(job_id)
        return None if q is None else await q.jobs.get(job_id)

    async def cancel(self, job_id: str) -> bool:
        """``Jobs.cancel`` on the partition holding ``job_id``; False when none does."""
        q = await self.find(job_id)
        return False if q is None else await q.jobs.cancel(job_id)

    async def server_time_ms(self) -> int:
        """The first partition's server clock (a lease is judged on its own partition's)."""
        return await self.partitions[0].server_time_ms()

    async def workers(self) -> list[WorkerInfo]:
        """Workers registered on any partition, once each, as the row of their latest beat
        (an idle partition's consumer beats rarely, so its row may be seconds stale)."""
        each = await asyncio.gather(*(q.workers() for q in self.partitions))
        seen: dict[str, WorkerInfo] = {}
        for rows in each:
            for w in rows:
                known = seen.get(w.worker_id)
                if known is None or beat_of(w.meta) > beat_of(known.meta):
                    seen[w.worker_id] = w
        return list(seen.values())

    async def stats(self, max_lanes: int = 1000) -> PartitionedStats:
        """Every partition's ``Queue.stats`` summed, each one under ``"partitions"``."""
        each = await asyncio.gather(*(q.stats(max_lanes) for q in self.partitions))
        lanes: dict[str, int] = {}
        counters: dict[str, int] = {}
        refused: dict[str, int] = {}
        for s in each:
            for lane, depth in s["lanes"].items():  # a lane lives in one partition only
                if len(lanes) < max_lanes:
                    lanes[lane] = depth
            for k, v in s["counters"].items():
                counters[k] = counters.get(k, 0) + int(v)
            for k, v in s["refused"].items():
                refused[k] = refused.get(k, 0) + int(v)
        return {
            "pending": sum(s["pending"] for s in each),
            "active": sum(s["active"] for s in each),
            "scheduled": sum(s["scheduled"] for s in each),
            "completed": sum(s["completed"] for s in each),
            "dead": sum(s["dead"] for s in each),
            "lane_count": sum(s["lane_count"] for s in each),
            "paused": any(s["paused"] for s in each),
            "lanes": lanes,
            "counters": counters,
            "refused": refused,
            "server_now_ms": max(s["server_now_ms"] for s in each),
            "partitions": list(each),
        }


class PartitionedConsumer:
    """One :class:`Consumer` per partition under one worker id; ``concurrency`` is split
    evenly over the partitions (at least 1 each). Other keyword arguments go to every
    consumer."""

    def __init__(
        self,
        queue: Partitioned,
        handler: Handler,
        *,
        concurrency: int = 1,
        worker_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(queue, Partitioned):
            raise TypeError(f"queue must be an echomq.Partitioned, got {type(queue).__name__}")
        checks.integer("concurrency", concurrency, at_least=1)
        self.worker_id = worker_id or mint_worker_id()
        n = len(queue.partitions)
        share = [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]
        self.consumers = [
            Consumer(q, handler, concurrency=max(1, c), worker_id=self.worker_id, **kwargs)
            for q, c in zip(queue.partitions, share, strict=True)
        ]
        for c in self.consumers:  # every partition's row describes the whole worker
            c._heartbeat.describe = self._describe

    def _describe(self) -> dict[str, Any]:
        """The partitions' registry rows merged: waiting if any waits, else the first state
        other than idle; the jobs held anywhere, the jobs done everywhere."""
        rows = [c._describe() for c in self.consumers]
        states = [str(r.get("state") or "idle") for r in rows]
        merged = dict(rows[0])
        merged["state"] = (
            "waiting" if "waiting" in states else next((s for s in states if s != "idle"), "idle")
        )
        merged["jobs"] = ",".join(str(r["jobs"]) for r in rows if r.get("jobs"))
        merged["jobs_done"] = sum(int(r.get("jobs_done") or 0) for r in rows)
        merged["waiting_for"] = next((r["waiting_for"] for r in rows if r.get("waiting_for")), "")
        return merged

    @property
    def counts(self) -> Counts:
        """A Consumer's counts, summed over the partitions."""
        return Counts.total(c.counts for c in self.consumers)

    @property
    def waiting(self) -> bool:
        """True while any partition's consumer waits for a dependency to answer."""
        return any(c.waiting for c in self.consumers)

    @property
    def concurrency(self) -> int:
        return sum(c.concurrency for c in self.consumers)

    @property
    def in_flight(self) -> list[Claim]:
        return [claim for c in self.consumers for claim in c.in_flight]

    @property
    def running(self) -> list[Claim]:
        return [claim for c in self.consumers for claim in c.running]

    def stop(self) -> None:
        for c in self.consumers:
            c.stop()

    async def run(self) -> None:
        """Run every partition's consumer until :meth:`stop`; if one ends with an error the
        others are stopped and the error raised."""
        tasks = [asyncio.create_task(c.run()) for c in self.consumers]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()
        finally:
            self.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
