"""The worker processes (``python -m bench.bench_partitions --worker``): consumers over every
partition of the queue."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator

from bench.common import (
    ROOT,
)
from bench.partitions.options import Options
from echomq.connection import connect
from echomq.partitions import Partitioned, PartitionedConsumer


async def worker_main(url: str, name: str, partitions: int, concurrency: int) -> None:
    conn = connect(url, socket_timeout=30)
    pq = Partitioned(conn, name, partitions)

    async def handler(claim: object) -> None:
        return None

    consumer = PartitionedConsumer(pq, handler, concurrency=concurrency, batch=32)
    await pq.stats()  # connected: the topology is known
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # "go"
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin
    finally:
        consumer.stop()
        await task
        await conn.aclose()


@contextlib.contextmanager
def worker_processes(
    url: str, opts: Options, partitions: int
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The worker processes, each connected (it printed "ready"); always reaped."""
    argv = [sys.executable, "-m", "bench.bench_partitions", "--worker", url, opts.name]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(opts.workers):
            procs.append(
                subprocess.Popen(
                    [*argv, str(partitions), str(opts.concurrency)],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    process_group=0,  # a terminal's Ctrl-C reaches us; we stop them
                )
            )
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"a bench worker exited early (code {p.wait()})")
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
