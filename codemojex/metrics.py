"""Prometheus metrics of one ScoreWorker process, served on a port of its own.

``codemojex worker --metrics-port P`` (``CODEMOJEX_METRICS_PORT``; 0 = off) serves
``/metrics`` on ``--metrics-host`` (``CODEMOJEX_METRICS_HOST``, 127.0.0.1) from a daemon
thread — prometheus-client's own server, which picks the exposition format from the
scraper's ``Accept`` header (``choose_encoder``). Under ``codemojex up --metrics-port P``
the supervisor gives its workers consecutive ports P, P+1, …; a replaced worker takes the
port of the one it replaces, so a static scrape list of ``--workers`` targets stays right.
With ``CODEMOJEX_METRICS_TOKEN`` set, a scrape needs ``Authorization: Bearer <that token>``
(else ``401``), as the web process's ``/metrics`` does (:func:`metrics_authorized`).

What is counted costs the scoring path nothing but one histogram observation per guess:
the consumer's and the scorer's own counters are read at scrape time (a collector), not
incremented twice. Queue-wide numbers (depths, reclaims, dead jobs) come from the web
process, which reads them from Valkey on each scrape; a worker reports what only it knows.
"""

from __future__ import annotations

import hmac
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

if TYPE_CHECKING:
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


def metrics_authorized(authorization: str | None, token: str | None) -> bool:
    """Whether a scrape sending this ``Authorization`` header may read ``/metrics``: any
    scrape when no metrics token is set, else only ``Bearer <token>``, compared in constant
    time."""
    if not token:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"),
        token.encode("utf-8", "surrogateescape"),
    )


_UNAUTHORIZED = b'{"error":"unauthorized","detail":"the metrics token is required"}'

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _guarded(app: WSGIApp, token: str | None) -> WSGIApp:
    """``app`` behind :func:`metrics_authorized` (the contract's 401 JSON without it)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if metrics_authorized(environ.get("HTTP_AUTHORIZATION"), token):
            return app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(_UNAUTHORIZED))),
                ("WWW-Authenticate", "Bearer"),
            ],
        )
        return [_UNAUTHORIZED]

    return guarded


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (as prometheus-client's own server): a scrape is no news."""


def _serve_wsgi(app: WSGIApp, host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """prometheus-client's ``start_http_server`` with our own app: a threaded WSGI server
    on ``host:port`` (IPv6 too), served from a daemon thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    httpd = make_server(host, port, app, Server, handler_class=_Quiet)
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread


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
            "fencing), lost (lease lost mid-score), released (handed back: at stop, or its "
            "database unreachable), unavailable (handed back because the database could not "
            "be reached), timed_out (scoring past the time limit, also counted as failed)",
            labels=["outcome"],
        )
        counts = consumer.counts
        outcomes = {
            "completed": counts.completed,
            "failed": counts.failed,
            "stale": counts.stale,
            "lost": counts.lost,
            "released": counts.released,
            "unavailable": counts.unavailable,
            "timed_out": counts.timed_out,
        }
        for outcome, count in outcomes.items():
            jobs.add_metric([outcome], count)
        yield jobs
        state = GaugeMetricFamily(
            "codemojex_worker_state",
            "1 for the state this worker is in: idle, scoring, or waiting (its database "
            "cannot be reached; it claims nothing until it answers)",
            labels=["state"],
        )
        now = (
            "waiting"
            if consumer.waiting
            else ("scoring" if scorer is not None and scorer.current else "idle")
        )
        for name in ("idle", "scoring", "waiting"):
            state.add_metric([name], 1 if name == now else 0)
        yield state
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

    def serve(self, port: int, host: str = "127.0.0.1", token: str | None = None) -> bool:
        """Serve ``/metrics`` on ``host:port``; False (logged) when the port is taken.
        With ``token``, only to ``Authorization: Bearer <token>`` (else 401).

        A worker that cannot serve its metrics keeps scoring: Prometheus reports the
        target down (``up == 0``), which the alert rules watch."""
        app = _guarded(make_wsgi_app(self.registry), token)
        try:
            self._server, self._thread = _serve_wsgi(app, host, port)
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
