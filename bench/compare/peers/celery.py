"""Celery's driver: Redis as broker, no result backend (``task_ignore_result``), a task
``noop`` sent with ``delay(stamp)``; one ``WorkController`` in this process with the solo
pool (one job at a time, in this process, so its CPU is counted here) and
``worker_prefetch_multiplier=C``; mingle, gossip and heartbeats off, as Celery's own test
worker has them (cluster chatter, not per-job work). Synchronous: ``--concurrency`` on the
enqueue side is that many threads. The peer library is imported by name (it lives only in
Celery's own venv)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
from typing import Any

from bench.compare.peers._protocol import record, serve_sync


class Celery:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        celery = importlib.import_module("celery")
        self.app: Any = celery.Celery("bench_compare", broker=a.url)
        self.app.conf.update(
            task_ignore_result=True,
            task_default_queue=a.queue,
            worker_prefetch_multiplier=a.concurrency,
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
            worker_redirect_stdouts=False,
        )

        def noop(t: int = 0) -> None:
            record(t)

        self.task: Any = self.app.task(name="noop")(noop)

    def open(self, role: str) -> None:
        with self.app.connection() as conn:
            conn.ensure_connection(max_retries=3)

    def enqueue(self, stamp: int) -> None:
        self.task.delay(stamp)

    def work(self) -> None:
        logging.getLogger("celery").setLevel(logging.WARNING)
        worker = importlib.import_module("celery.worker")
        controller = worker.WorkController(
            app=self.app,
            pool_cls="solo",
            concurrency=1,
            loglevel="WARNING",
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        controller.start()


if __name__ == "__main__":
    serve_sync(Celery, "celery", importlib.metadata.version("celery"))
