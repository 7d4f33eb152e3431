"""One consumer process of the lifecycle benchmark (started by ``bench.bench_echomq``).

    python -m bench.worker --lib echomq|saq|arq --url URL --queue NAME
                           [--source lanes|jobs] [--concurrency 32] [--batch 32] [--prefetch 0]

Protocol on stdio: prints ``READY`` once connected; starts consuming on a ``go`` line;
stops cleanly on ``stop`` or when stdin closes (the parent died); prints one JSON line
``{"lib", "completed", "cpu_s", "pid"}`` (CPU seconds since ``go``) and exits. The handler is a no-op returning a
small dict.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
from typing import Any

RESULT = {"ok": True, "n": 1}


_CPU_AT_GO: list[float] = []


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _stdin_lines(loop: asyncio.AbstractEventLoop, go: asyncio.Event, stop: asyncio.Event) -> None:
    for line in sys.stdin:
        word = line.strip()
        if word == "go":
            _CPU_AT_GO.append(_cpu())
            loop.call_soon_threadsafe(go.set)
        elif word == "stop":
            break
    loop.call_soon_threadsafe(go.set)  # EOF or stop: never wait for "go" any longer
    loop.call_soon_threadsafe(stop.set)


async def run_echomq(a: argparse.Namespace, go: asyncio.Event, stop: asyncio.Event) -> int:
    from echomq import Claim, Consumer, Queue, connect

    conn = connect(a.url)  # hiredis packing, as EchoMQ's own clients use
    await conn.ping()
    q = Queue(conn, a.queue)

    async def handler(claim: Claim) -> dict[str, Any]:
        return RESULT

    consumer = Consumer(
        q, handler, concurrency=a.concurrency, batch=a.batch, prefetch=a.prefetch, source=a.source
    )
    print("READY", flush=True)
    await go.wait()
    if stop.is_set():
        await conn.aclose()
        return 0
    task = asyncio.create_task(consumer.run())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    consumer.stop()
    await task
    stopper.cancel()
    await conn.aclose()
    return consumer.counts.completed


async def run_saq(a: argparse.Namespace, go: asyncio.Event, stop: asyncio.Event) -> int:
    from saq import Queue as SaqQueue
    from saq import Worker

    done = 0

    async def noop(ctx: Any) -> dict[str, Any]:
        return RESULT

    async def after(ctx: Any) -> None:
        nonlocal done
        done += 1

    queue = SaqQueue.from_url(a.url, name=a.queue)
    await queue.connect()
    worker = Worker(queue, [("noop", noop)], concurrency=a.concurrency, after_process=after)
    print("READY", flush=True)
    await go.wait()
    if not stop.is_set():
        task = asyncio.create_task(worker.start())
        await stop.wait()
        await worker.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await queue.disconnect()
    return done


async def run_arq(a: argparse.Namespace, go: asyncio.Event, stop: asyncio.Event) -> int:
    from arq.connections import RedisSettings, create_pool
    from arq.worker import Worker, func

    async def noop(ctx: Any) -> dict[str, Any]:
        return RESULT

    pool = await create_pool(RedisSettings.from_dsn(a.url), default_queue_name=a.queue)
    worker = Worker(
        functions=[func(noop, name="noop")],
        queue_name=a.queue,
        redis_pool=pool,
        max_jobs=a.concurrency,
        # arq polls its queue; its default 0.5 s would cap it at max_jobs per 0.5 s.
        poll_delay=0.005,
        handle_signals=False,
    )
    print("READY", flush=True)
    await go.wait()
    if not stop.is_set():
        worker.main_task = asyncio.create_task(worker.main())
        await stop.wait()
        worker.main_task.cancel()
        await asyncio.gather(worker.main_task, return_exceptions=True)
        await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
    done = worker.jobs_complete
    await pool.aclose()
    return done


async def main(a: argparse.Namespace) -> None:
    # SAQ warns when its blocked dequeues are cancelled at stop; that is expected here.
    logging.getLogger("saq").setLevel(logging.ERROR)
    loop = asyncio.get_running_loop()
    go, stop = asyncio.Event(), asyncio.Event()
    threading.Thread(target=_stdin_lines, args=(loop, go, stop), daemon=True).start()
    runner = {"echomq": run_echomq, "saq": run_saq, "arq": run_arq}[a.lib]
    # BENCH_CPROFILE=PREFIX: profile the whole run, written to PREFIX.<pid> (pstats format).
    profile_to = os.environ.get("BENCH_CPROFILE")
    prof = None
    if profile_to:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    completed = await runner(a, go, stop)
    if prof is not None:
        prof.disable()
        prof.dump_stats(f"{profile_to}.{os.getpid()}")
    cpu = _cpu() - (_CPU_AT_GO[0] if _CPU_AT_GO else 0.0)
    print(
        json.dumps(
            {
                "lib": a.lib,
                "completed": completed,
                "cpu_s": round(cpu, 3),
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.worker")
    p.add_argument("--lib", choices=("echomq", "saq", "arq"), default="echomq")
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--source", choices=("lanes", "jobs"), default="lanes")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prefetch", type=int, default=0)
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
