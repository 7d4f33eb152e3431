"""arq's driver: ``create_pool`` + ``enqueue_job("noop", stamp)``; one ``Worker`` with
``max_jobs=C`` and ``poll_delay=0.005`` (arq polls its queue: its default 0.5 s would cap a
drain at C jobs per half second), its defaults otherwise (results kept, as arq does). The
peer library is imported by name (it lives only in arq's own venv)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from typing import Any

from bench.compare.peers._protocol import record, serve_async


class Arq:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.pool: Any = None
        self.worker: Any = None

    async def open(self, role: str) -> None:
        connections = importlib.import_module("arq.connections")
        settings = connections.RedisSettings.from_dsn(self.a.url)
        self.pool = await connections.create_pool(settings, default_queue_name=self.a.queue)
        if role == "worker":
            arq_worker = importlib.import_module("arq.worker")

            async def noop(ctx: Any, t: int = 0) -> None:
                record(t)

            self.worker = arq_worker.Worker(
                functions=[arq_worker.func(noop, name="noop")],
                queue_name=self.a.queue,
                redis_pool=self.pool,
                max_jobs=self.a.concurrency,
                poll_delay=0.005,
                handle_signals=False,
            )

    async def enqueue(self, stamp: int) -> None:
        await self.pool.enqueue_job("noop", stamp)

    async def work(self) -> None:
        await self.worker.main()


if __name__ == "__main__":
    serve_async(Arq, "arq", importlib.metadata.version("arq"))
