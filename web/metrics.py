"""Prometheus metrics of one web process, in a registry of its own (so two apps in one
process — as in the tests — never collide in the global registry).

Process-local: submissions by outcome, scores pushed to sockets, the acceptance-to-score
latency (measured once per score event, not per socket). Queue-wide, read from Valkey on
each scrape: queue depths, stale completions refused, reclaims — the same numbers the
admin page shows, so every web process reports the whole queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Scoring normally takes milliseconds; a reclaimed job (killed worker) takes the lease.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120)


class QueueCollector(Collector):
    """Reports the last :meth:`codemojex.game.Admin.queue_view` snapshot handed to it.

    prometheus_client collects synchronously, so the scrape handler fetches the snapshot
    (async) first and this only formats it; ``None`` means Valkey did not answer.
    """

    def __init__(self) -> None:
        self.snapshot: dict[str, Any] | None = None

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("codemojex_queue_up", "1 when the queue answered this scrape")
        up.add_metric([], 1 if self.snapshot else 0)
        yield up
        s = self.snapshot
        if not s:
            return
        depth = GaugeMetricFamily(
            "codemojex_queue_jobs", "Guess jobs by EchoMQ state", labels=["state"]
        )
        for state in ("pending", "active", "scheduled", "completed", "dead"):
            depth.add_metric([state], s.get(state, 0))
        yield depth
        lanes = GaugeMetricFamily("codemojex_queue_lanes", "Non-empty lanes (players waiting)")
        lanes.add_metric([], len(s.get("lanes", [])))
        yield lanes
        c = s.get("counters", {})
        for name, key, text in (
            (
                "codemojex_stale_completions_refused",
                "stale_refused",
                "Stale (fenced-off) calls the queue refused",
            ),
            ("codemojex_reclaims", "reclaimed", "Jobs the reaper returned to their lane"),
            ("codemojex_queue_accepted", "accepted", "Guesses enqueued, all processes"),
            ("codemojex_queue_scored", "scored", "Guesses completed, all processes"),
            ("codemojex_queue_dead", "dead", "Jobs that ran out of deliveries"),
        ):
            fam = CounterMetricFamily(name, text)
            fam.add_metric([], c.get(key, 0))
            yield fam


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
        self.queue = QueueCollector()
        self.registry.register(self.queue)

    def render(self, snapshot: dict[str, Any] | None) -> bytes:
        self.queue.snapshot = snapshot
        return generate_latest(self.registry)
