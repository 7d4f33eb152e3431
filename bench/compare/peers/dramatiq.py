"""Dramatiq's driver: ``RedisBroker``, an actor ``noop`` sent with ``send(stamp)``; one
``Worker`` with ``worker_threads=C``, the default middleware. Synchronous: ``--concurrency``
on the enqueue side is that many threads. The peer library is imported by name (it lives
only in Dramatiq's own venv)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from typing import Any

from bench.compare.peers._protocol import record, serve_sync


class Dramatiq:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        dramatiq = importlib.import_module("dramatiq")
        redis_broker = importlib.import_module("dramatiq.brokers.redis")
        self.broker: Any = redis_broker.RedisBroker(url=a.url)
        dramatiq.set_broker(self.broker)

        def noop(t: int = 0) -> None:
            record(t)

        self.actor: Any = dramatiq.actor(
            noop, actor_name="noop", queue_name=a.queue, broker=self.broker
        )

    def open(self, role: str) -> None:
        self.broker.client.ping()

    def enqueue(self, stamp: int) -> None:
        self.actor.send(stamp)

    def work(self) -> None:
        dramatiq = importlib.import_module("dramatiq")
        worker = dramatiq.Worker(self.broker, worker_threads=self.a.concurrency)
        worker.start()  # its consumer and worker threads run on; serve_sync idles after


if __name__ == "__main__":
    serve_sync(Dramatiq, "dramatiq", importlib.metadata.version("dramatiq"))
