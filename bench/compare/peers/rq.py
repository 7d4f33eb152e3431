"""RQ's driver: ``Queue.enqueue`` of this module's ``noop`` by its dotted name; one
``SimpleWorker`` (jobs run in this process, one at a time: RQ's default ``Worker`` forks a
work horse per job, whose CPU would not be this process's), its defaults otherwise (job
status and results kept, as RQ does). Synchronous: ``--concurrency`` on the enqueue side is
that many threads. The peer library is imported by name (it lives only in RQ's own venv)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from typing import Any

from bench.compare.peers._protocol import record, serve_sync

NOOP = "bench.compare.peers.rq.noop"


def noop(t: int = 0) -> None:
    record(t)


class Rq:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        redis = importlib.import_module("redis")
        rq = importlib.import_module("rq")
        self.conn: Any = redis.Redis.from_url(a.url)
        self.queue: Any = rq.Queue(a.queue, connection=self.conn)

    def open(self, role: str) -> None:
        self.conn.ping()

    def enqueue(self, stamp: int) -> None:
        self.queue.enqueue(NOOP, stamp)

    def work(self) -> None:
        rq = importlib.import_module("rq")
        worker = rq.SimpleWorker([self.queue], connection=self.conn)
        worker.work(with_scheduler=False, logging_level="WARNING")


if __name__ == "__main__":
    serve_sync(Rq, "rq", importlib.metadata.version("rq"))
