"""taskiq-redis's driver: ``RedisStreamBroker`` (a stream with a consumer group, acks by
XACK), a task ``noop`` sent with ``kiq(stamp)``; one ``Receiver`` with
``max_async_tasks=C``, its defaults otherwise. The consumer group is created by the
producer's ``startup`` before its first job, so the worker, started later, reads them all.
The peer library is imported by name (it lives only in taskiq's own venv)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
from typing import Any

from bench.compare.peers._protocol import record, serve_async


class Taskiq:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        taskiq_redis = importlib.import_module("taskiq_redis")
        self.broker: Any = taskiq_redis.RedisStreamBroker(a.url, queue_name=a.queue)

        async def noop(t: int = 0) -> None:
            record(t)

        self.task: Any = self.broker.task(task_name="noop")(noop)

    async def open(self, role: str) -> None:
        self.broker.is_worker_process = role == "worker"
        await self.broker.startup()

    async def enqueue(self, stamp: int) -> None:
        await self.task.kiq(stamp)

    async def work(self) -> None:
        receiver = importlib.import_module("taskiq.receiver")
        r = receiver.Receiver(self.broker, max_async_tasks=self.a.concurrency, run_startup=False)
        await r.listen(asyncio.Event())


if __name__ == "__main__":
    serve_async(Taskiq, "taskiq-redis", importlib.metadata.version("taskiq-redis"))
