"""Prometheus metrics of one ScoreWorker process, served on a port of its own.

``codemojex worker --metrics-port P`` (``CODEMOJEX_METRICS_PORT``; 0 = off) serves
``/metrics`` on ``--metrics-host`` (``CODEMOJEX_METRICS_HOST``, 127.0.0.1) from a daemon
thread — prometheus-client's own server, which picks the exposition format from the
scraper's ``Accept`` header (``choose_encoder``). Under ``codemojex up --metrics-port P``
the supervisor gives its workers consecutive ports P, P+1, …; a replaced worker takes the
port of the one it replaces, so a static scrape list of ``--workers`` targets stays right.

What is counted costs the scoring path nothing but one histogram observation per guess:
the consumer's and the scorer's own counters are read at scrape time (a collector), not
incremented twice. Queue-wide numbers (depths, reclaims, dead jobs) come from the web
process, which reads them from Valkey on each scrape; a worker reports what only it knows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    import echomq
    from codemojex.score_worker import ScoreWorker

log = logging.getLogger("codemojex.worker")

# From acceptance to the score's commit: milliseconds normally; a reclaimed guess (killed
# worker) waits out the lapse or the lease. The web process's score latency uses the same.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120)


def standard_collectors(registry: CollectorRegistry) -> None:
    """The process (CPU, RSS, fds), GC and platform collectors, in ``registry``.

    Each of our registries is private (two apps in one test process must not collide), so
    the default registry's collectors are registered in it again."""
    for collector in (PROCESS_COLLECTOR, GC_COLLECTOR, PLATFORM_COLLECTOR):
        registry.register(collector)


@dataclass
class _Sources:
    worker_id: str
    consumer: echomq.Consumer | echomq.PartitionedConsumer | None = None
    scorer: ScoreWorker | None = None


class _WorkerCollector(Collector):
    """Formats the consumer's and scorer's counters at scrape time."""

    def __init__(self, sources: _Sources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        s = self.sources
        info = GaugeMetricFamily(
            "codemojex_worker_info", "This worker process's id (always 1)", labels=["worker_id"]
        )
        info.add_metric([s.worker_id], 1)
        yield info
        scorer, consumer = s.scorer, s.consumer
        if scorer is not None:
            scored = CounterMetricFamily(
                "codemojex_worker_scored", "Scores this worker wrote (first writes only)"
            )
            scored.add_metric([], scorer.scored)
            yield scored
        if consumer is None:
            return
        jobs = CounterMetricFamily(
            "codemojex_worker_jobs",
            "Outcomes of this worker's claimed jobs: completed, failed, stale (refused by "
            "fencing), lost (lease lost mid-score), released (handed back at stop)",
            labels=["outcome"],
        )
        outcomes = {
            "completed": consumer.completed,
            "failed": consumer.failed,
            "stale": consumer.stale,
            "lost": consumer.lost,
            "released": consumer.released,
        }
        for outcome, count in outcomes.items():
            jobs.add_metric([outcome], count)
        yield jobs
        held = GaugeMetricFamily("codemojex_worker_in_flight", "Jobs this worker holds now")
        held.add_metric([], len(consumer.in_flight))
        yield held
        slots = GaugeMetricFamily("codemojex_worker_concurrency", "Handlers this worker may run")
        slots.add_metric([], consumer.concurrency)
        yield slots


class WorkerMetrics:
    """The registry of one worker process and its optional HTTP endpoint."""

    def __init__(self, worker_id: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        standard_collectors(self.registry)
        self._sources = _Sources(worker_id)
        self.registry.register(_WorkerCollector(self._sources))
        self.accept_to_score = Histogram(
            "codemojex_worker_accept_to_score_seconds",
            "From a guess's acceptance (enqueue, Valkey clock) to its score's commit "
            "(this worker's clock)",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def watch(
        self, consumer: echomq.Consumer | echomq.PartitionedConsumer, scorer: ScoreWorker
    ) -> None:
        self._sources.consumer = consumer
        self._sources.scorer = scorer

    def timed(self, handler: echomq.Handler) -> echomq.Handler:
        """``handler`` observing accept->score latency when it returns (not when it fails).

        The enqueue time is on the Valkey clock and the end on this host's: the skew
        between them is the error, as it is for every latency measured across hosts."""
        observe = self.accept_to_score.observe

        async def timed_handler(claim: echomq.Claim) -> Any:
            result = await handler(claim)
            if claim.enqueued_at_ms:
                observe(max(0.0, time.time() - claim.enqueued_at_ms / 1000))
            return result

        return timed_handler

    def serve(self, port: int, host: str = "127.0.0.1") -> bool:
        """Serve ``/metrics`` on ``host:port``; False (logged) when the port is taken.

        A worker that cannot serve its metrics keeps scoring: Prometheus reports the
        target down (``up == 0``), which the alert rules watch."""
        try:
            self._server, self._thread = start_http_server(port, host, self.registry)
        except OSError as e:
            log.error("metrics: cannot listen on %s:%d: %s", host, port, e)
            return False
        log.info("metrics on http://%s:%d/metrics", host, port)
        return True

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
