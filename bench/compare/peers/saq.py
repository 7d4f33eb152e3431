"""SAQ's driver: ``Queue.from_url`` + ``enqueue("noop", t=stamp)``; one ``Worker`` with
``concurrency=C``, its defaults otherwise. The peer library is imported by name (it lives
only in SAQ's own venv)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
from typing import Any

from bench.compare.peers._protocol import record, serve_async


class Saq:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        saq = importlib.import_module("saq")
        self.queue: Any = saq.Queue.from_url(a.url, name=a.queue)
        self.worker: Any = None

    async def open(self, role: str) -> None:
        await self.queue.connect()
        if role == "worker":
            saq = importlib.import_module("saq")

            async def noop(ctx: Any, *, t: int = 0) -> None:
                record(t)

            # SAQ warns when its blocked dequeues are cancelled; expected at the end.
            logging.getLogger("saq").setLevel(logging.ERROR)
            self.worker = saq.Worker(self.queue, [("noop", noop)], concurrency=self.a.concurrency)

    async def enqueue(self, stamp: int) -> None:
        await self.queue.enqueue("noop", t=stamp)

    async def work(self) -> None:
        await self.worker.start()


if __name__ == "__main__":
    serve_async(Saq, "saq", importlib.metadata.version("saq"))
