"""Prometheus metrics of one web process, in a registry of its own (so two apps in one
process — as in the tests — never collide in the global registry).

Process-local: requests by route template (never the raw path: label values stay
bounded), method and status, with a latency histogram per route; submissions by outcome,
scores pushed to sockets, the acceptance-to-score latency (measured once per score event,
not per socket); the process, GC and platform collectors. Queue-wide, read from Valkey on
each scrape: queue depths, lanes, stale completions refused, reclaims, dead jobs, workers
alive — read by :mod:`echomq.metrics` (``echomq_*`` families) and also named as the alert
rules and the dashboard know them (``codemojex_queue_*``); the same numbers the admin page
shows, so every web process reports the whole queue (aggregate them with ``max``, not
``sum``). Workers serve their own metrics
(:mod:`codemojex.metrics`). The exposition format follows the scraper's ``Accept`` header
(prometheus-client's ``choose_encoder``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import echomq
from codemojex.metrics import LATENCY_BUCKETS, standard_collectors
from echomq.metrics import STATES, QueueCollector

# Scoring normally takes milliseconds; a reclaimed job (killed worker) takes the lease.
_LATENCY_BUCKETS = LATENCY_BUCKETS
# A request's whole life is bounded by the edge's 5 s deadline.
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Anything else a client sends as a method is one label value, not one each.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "<unmatched>"


class GameQueueNames(Collector):
    """The guesses queue's numbers under the names the alert rules and the dashboard use
    (``codemojex_queue_*``, ``codemojex_workers_alive``, …), formatted from the snapshot
    of the :class:`echomq.metrics.QueueCollector` beside it; no read of its own."""

    def __init__(self) -> None:
        self.source: QueueCollector | None = None

    def collect(self) -> Iterator[Metric]:
        s = None
        if self.source is not None:
            s = self.source.snapshot(self.source.queues[0].name)
        up = GaugeMetricFamily("codemojex_queue_up", "1 when the queue answered this scrape")
        up.add_metric([], 1 if s else 0)
        yield up
        if s is None:
            return
        st = s.stats
        depth = GaugeMetricFamily(
            "codemojex_queue_jobs", "Guess jobs by EchoMQ state", labels=["state"]
        )
        for state in STATES:
            depth.add_metric([state], st[state])  # type: ignore[literal-required]
        yield depth
        lanes = GaugeMetricFamily("codemojex_queue_lanes", "Non-empty lanes (players waiting)")
        lanes.add_metric([], st["lane_count"])
        yield lanes
        alive = GaugeMetricFamily(
            "codemojex_workers_alive", "ScoreWorkers in the registry (heartbeat not lapsed)"
        )
        alive.add_metric([], s.workers_alive)
        yield alive
        c = st["counters"]
        for name, value, text in (
            (
                "codemojex_stale_completions_refused",
                sum(st["refused"].values()),
                "Stale (fenced-off) calls the queue refused",
            ),
            ("codemojex_reclaims", c.get("reaped", 0), "Jobs the reaper returned to their lane"),
            ("codemojex_queue_accepted", c.get("enqueued", 0), "Guesses enqueued, all processes"),
            ("codemojex_queue_scored", c.get("completed", 0), "Guesses completed, all processes"),
            ("codemojex_queue_dead", c.get("dead", 0), "Jobs that ran out of deliveries"),
        ):
            fam = CounterMetricFamily(name, text)
            fam.add_metric([], value)
            yield fam


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        standard_collectors(self.registry)
        self.requests = Counter(
            "codemojex_http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "codemojex_http_request_duration_seconds",
            "HTTP request latency by route template and method, first byte in to last out",
            ["route", "method"],
            buckets=_HTTP_BUCKETS,
            registry=self.registry,
        )
        self.submissions = Counter(
            "codemojex_submissions",
            "Guess submissions by outcome (accepted, replayed or the error code)",
            ["outcome"],
            registry=self.registry,
        )
        self.scores_pushed = Counter(
            "codemojex_scores_pushed", "Score messages handed to sockets", registry=self.registry
        )
        self.score_latency = Histogram(
            "codemojex_score_latency_seconds",
            "From acceptance (the JOB id's mint time) to the completion event",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.sockets_evicted = Counter(
            "codemojex_sockets_evicted",
            "Sockets closed 4008 for falling behind",
            registry=self.registry,
        )
        self.sockets_displaced = Counter(
            "codemojex_sockets_displaced",
            "Sockets closed 1013 to make room in a full process for a lighter address",
            registry=self.registry,
        )
        self.broadcast_frames = Counter(
            "codemojex_broadcast_frames",
            "Progress, leaderboard and round frames written to sockets (one write each)",
            registry=self.registry,
        )
        self.progress_quiet = Gauge(
            "codemojex_progress_quiet_seconds",
            "How long the fan-out budget kept the flusher quiet after its last broadcast",
            registry=self.registry,
        )
        self.queue = GameQueueNames()
        self.registry.register(self.queue)

    async def refresh_queue(self, queues: echomq.Queue | echomq.Partitioned) -> None:
        """Read the guesses queue for this scrape (``echomq.metrics``); raises what the read
        raised, and the queue's series then say it is down. The first call registers the
        ``echomq_*`` families beside the dashboards' names."""
        source = self.queue.source
        if source is None:
            source = self.queue.source = QueueCollector(queues)
            self.registry.register(source)
        await source.refresh()

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition (in the format ``accept`` asks for) and its content type."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type


class RouteMetrics:
    """ASGI middleware: counts and times every HTTP request under its route's template.

    The router writes the matched route into the scope (``scope["route"]``), which this
    reads after the app answered, so ``/api/guesses/JOB_…`` counts as
    ``/api/guesses/{job_id}`` and an unknown path as ``<unmatched>``. Per request: two
    clock reads, one dict lookup of cached label children, one increment, one observation
    (the label children are looked up once per distinct (route, method, status)).
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what a client sees if the app dies before it answers

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_status)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in _METHODS else "other"
            key = (template, method, status)
            children = self._children.get(key)
            if children is None:
                children = self._children[key] = (
                    self.metrics.requests.labels(template, method, str(status)),
                    self.metrics.request_seconds.labels(template, method),
                )
            children[0].inc()
            children[1].observe(elapsed)
