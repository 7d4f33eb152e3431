"""EchoMQ's driver: ``--variant lanes`` (fair lanes, jobs spread over ``--lanes`` lanes) or
``--variant plain`` (the plain FIFO), through the public API only: ``Queue``,
``q.lanes.enqueue`` / ``q.jobs.enqueue``, ``Consumer(concurrency=C, batch=32)``, and
``--prefetch`` (0, EchoMQ's default, or ``concurrency``: C more held ready). Runs in this
project's venv. The handler is a no-op that records the job's stamp."""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
from typing import Any

from bench.compare.peers._protocol import record, run_forever, serve_async


def _extra(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", choices=("lanes", "plain"), default="lanes")
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    # "concurrency": as many again as the handlers, the jobs Dramatiq's worker holds by
    # default (its queue prefetch is twice its threads); EchoMQ's own default is 0.
    p.add_argument("--prefetch", default="0", help="an integer, or 'concurrency'")


class EchoMQ:
    def __init__(self, a: argparse.Namespace) -> None:
        import echomq

        self.a = a
        self.conn = echomq.connect(a.url)  # hiredis packing, as EchoMQ's own clients use
        self.q = echomq.Queue(self.conn, a.queue)
        self.lane_of = itertools.cycle([f"L{i:03d}" for i in range(a.lanes)])
        self.consumer: Any = None

    async def open(self, role: str) -> None:
        import echomq

        await self.conn.ping()
        if role == "worker":

            async def handler(claim: echomq.Claim) -> None:
                record(int(claim.payload.get("t", 0)))

            self.consumer = echomq.Consumer(
                self.q,
                handler,
                concurrency=self.a.concurrency,
                batch=self.a.batch,
                prefetch=(
                    self.a.concurrency if self.a.prefetch == "concurrency" else int(self.a.prefetch)
                ),
                source="lanes" if self.a.variant == "lanes" else "jobs",
            )

    async def enqueue(self, stamp: int) -> None:
        if self.a.variant == "lanes":
            await self.q.lanes.enqueue(next(self.lane_of), {"t": stamp})
        else:
            await self.q.jobs.enqueue({"t": stamp})

    async def work(self) -> None:
        await self.consumer.run()
        await run_forever()


if __name__ == "__main__":
    serve_async(EchoMQ, "echomq", importlib.metadata.version("codemojex"), _extra)
