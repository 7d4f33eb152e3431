"""Partitioned queues on a 3-master Valkey Cluster: throughput against partitions. Prints
figures, it is not a test.

    uv run python -m bench.bench_partitions [--jobs 20000] [--workers 2] [--partitions 1,3,6]
                                            [--appendfsync always]

Starts its own cluster (``tests/cluster.py``: 3 masters, AOF on, ``appendfsync always`` as
in production) in a temp dir. For each partition count N: ``--jobs`` jobs over 300 lanes
are enqueued (100 at once; the rate is measured), then drained by ``--workers`` worker
processes (started, connected and told "go" together), each an ``echomq.PartitionedConsumer`` (concurrency 32, a handler that returns
at once); the clock runs from "go" to the moment the summed stats count every job
completed. One partition is today's queue: one slot, one master.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from echomq.connection import connect
from echomq.partitions import Partitioned, PartitionedConsumer
from tests.cluster import ValkeyCluster

ROOT = Path(__file__).resolve().parent.parent
LANES = 300


async def _worker(url: str, name: str, partitions: int) -> None:
    conn = connect(url, socket_timeout=30)
    pq = Partitioned(conn, name, partitions)

    async def handler(claim: object) -> None:
        return None

    consumer = PartitionedConsumer(pq, handler, concurrency=32, batch=32)
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


def _spawn(url: str, name: str, partitions: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bench_partitions", "--worker", url, name, str(partitions)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=os.environ,
    )


async def _measure(url: str, name: str, partitions: int, jobs: int, workers: int) -> str:
    conn = connect(url, socket_timeout=30)
    pq = Partitioned(conn, name, partitions)
    t0 = time.perf_counter()
    for start in range(0, jobs, 100):
        await asyncio.gather(
            *(pq.enqueue(f"l{i % LANES}", i) for i in range(start, min(jobs, start + 100)))
        )
    enqueue_s = time.perf_counter() - t0
    procs = [_spawn(url, name, partitions) for _ in range(workers)]
    try:
        for p in procs:  # every worker imported and connected before the clock starts
            assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
        t0 = time.perf_counter()
        while (await pq.stats(max_lanes=0))["completed"] < jobs:
            await asyncio.sleep(0.02)
        drain_s = time.perf_counter() - t0
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            p.wait(30)
        await conn.aclose()
    masters = len({pq.conn.get_node_from_key(q.keys.prefix).name for q in pq.partitions})
    return (
        f"| {partitions} | {masters} | {jobs / enqueue_s:,.0f} | {jobs / drain_s:,.0f} "
        f"| {drain_s:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", default="1,3,6")
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, name, partitions = args.worker
        asyncio.run(_worker(url, name, int(partitions)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        cluster = ValkeyCluster(Path(tmp), masters=3, appendfsync=args.appendfsync)
        cluster.start()
        try:
            print(
                f"{args.jobs} jobs over {LANES} lanes, {args.workers} worker processes, "
                f"3 masters, appendfsync {args.appendfsync}, {os.cpu_count()} CPUs"
            )
            print("| partitions | masters used | enqueued/s | completed/s | drain s |")
            print("|---|---|---|---|---|")
            for i, n in enumerate(int(x) for x in args.partitions.split(",")):
                row = asyncio.run(_measure(cluster.url, f"bench{i}", n, args.jobs, args.workers))
                print(row, flush=True)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
