"""``echomq.metrics``: a queue's numbers as Prometheus metrics (the ``metrics`` extra).

A scrape only formats the last snapshot :meth:`QueueCollector.refresh` read: scrapes are
synchronous and echomq's client is bound to its event loop (docs/api/metrics.md)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ModuleNotFoundError as missing:  # the `metrics` extra; echomq itself needs none of it
    raise ModuleNotFoundError(
        f"echomq.metrics needs {missing.name}: pip install 'echomq[metrics]'",
        name=missing.name,
    ) from missing

from . import admin, checks
from .partitions import Partitioned
from .queue import Queue
from .types import QueueStats

log = logging.getLogger("echomq.metrics")

STATES = ("pending", "active", "scheduled", "completed", "dead")
MAX_AGE_S = 60.0

AnyQueue = Queue | Partitioned


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One read of a queue: its ``stats()`` and the workers registered on it."""

    queue: str
    stats: QueueStats
    workers_alive: int
    read_at: float  # time.monotonic() of this process when the read answered


async def read(queue: AnyQueue, *, lanes: int = 0) -> QueueSnapshot:
    """A :class:`QueueSnapshot` of ``queue``, listing the first ``lanes`` lanes' depths.

    A partitioned queue's figures are summed over its partitions; its workers are counted
    on the first partition, where every :class:`~echomq.PartitionedConsumer` registers."""
    if not isinstance(queue, Queue | Partitioned):
        raise TypeError(f"queue must be an echomq.Queue or Partitioned, got {type(queue).__name__}")
    checks.integer("lanes", lanes, at_least=0)
    first = queue if isinstance(queue, Queue) else queue.partitions[0]
    stats, alive = await asyncio.gather(queue.stats(max_lanes=lanes), admin.worker_count(first))
    return QueueSnapshot(queue.name, stats, alive, time.monotonic())


class QueueCollector(Collector):
    """The metrics of ``queues`` (see :mod:`echomq.metrics`), from their last snapshot.

    Args:
        queues: one or more :class:`~echomq.Queue` or :class:`~echomq.Partitioned`, each
            with a name of its own (the ``queue`` label).
        lanes: lanes listed with their depth per queue (0: none).
        max_age_s: a snapshot older than this reports ``echomq_up 0``.
        prefix: the metric names' first word.
    """

    def __init__(
        self,
        *queues: AnyQueue,
        lanes: int = 0,
        max_age_s: float = MAX_AGE_S,
        prefix: str = "echomq",
    ) -> None:
        if not queues:
            raise TypeError("QueueCollector needs at least one queue")
        for q in queues:
            if not isinstance(q, Queue | Partitioned):
                raise TypeError(
                    f"queues must be echomq.Queue or Partitioned, got {type(q).__name__}"
                )
        names = [q.name for q in queues]
        if len(set(names)) != len(names):
            raise ValueError(f"two queues share a name: {names}")
        checks.integer("lanes", lanes, at_least=0)
        if isinstance(max_age_s, bool) or not isinstance(max_age_s, int | float):
            raise TypeError("max_age_s must be a number of seconds")
        if not max_age_s > 0:
            raise ValueError("max_age_s must be > 0")
        if not isinstance(prefix, str) or not prefix.isidentifier():
            raise ValueError(f"prefix must be a metric name's first word, got {prefix!r}")
        self.queues = queues
        self.lanes = lanes
        self.max_age_s = float(max_age_s)
        self.prefix = prefix
        # Replaced whole, never mutated: collect() may run on the scrape thread meanwhile.
        self._snapshots: dict[str, QueueSnapshot] = {}

    def snapshot(self, queue: str) -> QueueSnapshot | None:
        """``queue``'s last snapshot while it is fresh (``echomq_up 1``), else None."""
        s = self._snapshots.get(queue)
        if s is None or time.monotonic() - s.read_at > self.max_age_s:
            return None
        return s

    @property
    def snapshots(self) -> Mapping[str, QueueSnapshot]:
        """The fresh snapshots, by queue name."""
        return {name: s for name in self._snapshots if (s := self.snapshot(name)) is not None}

    async def refresh(self) -> None:
        """Read every queue now. A queue whose read fails (or is cancelled, as by a
        timeout around this call) reports ``echomq_up 0`` until a read answers again; the
        first error is raised once every queue was tried."""
        try:
            results = await asyncio.gather(
                *(read(q, lanes=self.lanes) for q in self.queues), return_exceptions=True
            )
        except BaseException:  # cut short: no queue answered this refresh
            self._snapshots = {}
            raise
        fresh = dict(self._snapshots)
        failure: BaseException | None = None
        for q, got in zip(self.queues, results, strict=True):
            if isinstance(got, BaseException):
                fresh.pop(q.name, None)
                failure = failure or got
            else:
                fresh[q.name] = got
        self._snapshots = fresh
        if failure is not None:
            raise failure

    async def run(self, every_s: float = 5.0) -> None:
        """Refresh every ``every_s`` seconds until cancelled, logging (not raising) a read
        that fails: for a process whose scrapes are served from another thread."""
        if isinstance(every_s, bool) or not isinstance(every_s, int | float):
            raise TypeError("every_s must be a number of seconds")
        if not every_s > 0:
            raise ValueError("every_s must be > 0")
        while True:
            try:
                await asyncio.wait_for(self.refresh(), timeout=max(every_s, 1.0))
            except Exception as e:  # noqa: BLE001 - reported as echomq_up 0, tried again
                log.warning("metrics: cannot read the queue: %s: %s", type(e).__name__, e)
            await asyncio.sleep(every_s)

    def collect(self) -> Iterator[Metric]:
        p = self.prefix
        fresh = self.snapshots
        up = GaugeMetricFamily(
            f"{p}_up", "1 when the queue answered its last read in time", labels=["queue"]
        )
        age = GaugeMetricFamily(
            f"{p}_snapshot_age_seconds", "Age of the numbers reported", labels=["queue"]
        )
        jobs = GaugeMetricFamily(f"{p}_jobs", "Jobs by state", labels=["queue", "state"])
        lanes = GaugeMetricFamily(f"{p}_lanes", "Non-empty lanes", labels=["queue"])
        depth = GaugeMetricFamily(
            f"{p}_lane_depth", "Jobs waiting in a lane served next", labels=["queue", "lane"]
        )
        alive = GaugeMetricFamily(
            f"{p}_workers_alive", "Consumers in the worker registry", labels=["queue"]
        )
        paused = GaugeMetricFamily(
            f"{p}_paused", "1 while claims hand out nothing (Queue.pause)", labels=["queue"]
        )
        moved = CounterMetricFamily(
            f"{p}_transitions",
            "The queue's counters (enqueued, claimed, completed, failed, reaped, dead, ...)",
            labels=["queue", "transition"],
        )
        refused = CounterMetricFamily(
            f"{p}_refused", "Stale calls refused by fencing", labels=["queue", "op"]
        )
        now = time.monotonic()
        for q in self.queues:
            s = fresh.get(q.name)
            up.add_metric([q.name], 0 if s is None else 1)
            if s is None:
                continue
            st = s.stats
            age.add_metric([q.name], max(0.0, now - s.read_at))
            for state in STATES:
                jobs.add_metric([q.name, state], st[state])  # type: ignore[literal-required]
            lanes.add_metric([q.name], st["lane_count"])
            for lane, n in st["lanes"].items():
                depth.add_metric([q.name, lane], n)
            alive.add_metric([q.name], s.workers_alive)
            paused.add_metric([q.name], 1 if st["paused"] else 0)
            for name, n in sorted(st["counters"].items()):
                moved.add_metric([q.name, name], n)
            for op, n in sorted(st["refused"].items()):
                refused.add_metric([q.name, op], n)
        yield from (up, age, jobs, lanes, depth, alive, paused, moved, refused)
