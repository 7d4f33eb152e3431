"""The driver's half of ``bench.compare``'s protocol. Standard library only: it runs inside each
peer's own venv, beside that peer's redis-py, never beside ours.

A driver process plays one role, named on its command line: ``producer`` (enqueues) or
``worker`` (consumes, one process). It writes JSON lines to the protocol's own descriptor, a
copy of the stdout it was given; its fd 1 is then pointed at stderr, so a library that prints
(a banner, a warning) cannot corrupt the protocol. It reads one JSON command a line on stdin:

    -> {"op": "enqueue", "n": N, "concurrency": C}  <- {"reply": "enqueue", "seconds": s}
    -> {"op": "paced", "n": N, "rate": R}           <- {"reply": "paced", "seconds": s, "lag_ms": m}
    -> {"op": "arm", "expect": N}                   <- {"reply": "arm"}  (worker: reset the count)
    -> {"op": "go"}                                 <- {"reply": "go", "t_us": t}  (worker, once)
    -> {"op": "report"}                             <- {"reply": "report", "handled", "cpu_s",
                                                        "times_us", "latency_us"}
    -> {"op": "stop"}                               <- {"reply": "stop"}, then the process exits

Its first line is ``{"event": "ready", "peer", "version", "role", "pid"}``. A worker also
sends ``{"event": "progress", "handled": k}`` about every 0.1 s while k moves and
``{"event": "done", "handled": k}`` as soon as the armed count is reached. A failed command
answers ``{"reply": op, "error": text}``; a worker whose consuming loop dies sends
``{"event": "error", "error": text}``. stdin's end (the parent died) ends the process.

``enqueue`` jobs carry the stamp 0; ``paced`` jobs carry ``time.monotonic_ns()`` taken just
before their enqueue call, and the worker's handler, calling ``record(stamp)``, takes the
completion time on the same clock: CLOCK_MONOTONIC is one clock for every process of the
machine, so ``now - stamp`` is the job's end-to-end latency. ``paced`` is open loop: a job's
turn comes at ``start + i / rate`` whether or not earlier ones are done (each enqueue its own
task on the asynchronous peers, at most 10 in flight; one thread on the synchronous ones,
whose single enqueue takes well under the 2 ms between turns at 500/s; ``lag_ms`` says how
far behind it fell).

``cpu_s`` is the worker process's own CPU time (every thread, user + system) from ``arm`` to
the armed count's last job, or to the report if it was not reached.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import IO, Any, Protocol

PROGRESS_S = 0.1
PACED_IN_FLIGHT = 10


class AsyncPeer(Protocol):
    async def open(self, role: str) -> None: ...
    async def enqueue(self, stamp: int) -> None: ...
    async def work(self) -> None: ...  # consumes until the process ends


class SyncPeer(Protocol):
    def open(self, role: str) -> None: ...
    def enqueue(self, stamp: int) -> None: ...
    def work(self) -> None: ...  # blocks, consuming, until the process ends


# ---------------------------------------------------------------------------------------------
# What the handler records


class Recorder:
    """Every handled job's completion time and, for stamped jobs, its latency."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.arm(0)

    def arm(self, expect: int) -> None:
        with self.lock:
            self.expect = expect
            self.handled = 0
            self.times: list[int] = []
            self.latency: list[int] = []
            self.cpu0 = time.process_time()
            self.cpu_last: float | None = None
            self.done.clear()

    def record(self, stamp: int) -> None:
        now = time.monotonic_ns()
        with self.lock:
            self.handled += 1
            self.times.append(now)
            if stamp:
                self.latency.append(now - stamp)
            if self.handled == self.expect:
                self.cpu_last = time.process_time()
                self.done.set()

    def report(self) -> dict[str, Any]:
        with self.lock:
            cpu_end = self.cpu_last if self.cpu_last is not None else time.process_time()
            return {
                "handled": self.handled,
                "cpu_s": round(cpu_end - self.cpu0, 6),
                "times_us": [t // 1000 for t in self.times],
                "latency_us": [t // 1000 for t in self.latency],
            }


RECORDER = Recorder()


def record(stamp: int) -> None:
    """Called by every driver's no-op handler, once per job."""
    RECORDER.record(stamp)


# ---------------------------------------------------------------------------------------------
# The wire


class Wire:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.out: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)  # from now on anything printed lands on stderr, not in the protocol

    def send(self, **msg: Any) -> None:
        line = json.dumps(msg, separators=(",", ":"))
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()

    def bye(self) -> None:
        with self.lock:
            self.out.flush()
        os._exit(0)  # no peer's shutdown path can hang the run: Valkey is flushed anyway


def parse(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=("producer", "worker"), required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--concurrency", type=int, default=32)
    if extra is not None:
        extra(p)
    return p.parse_args()


def _progress(wire: Wire) -> None:
    last = -1
    announced = False
    while True:
        RECORDER.done.wait(PROGRESS_S)
        handled, done = RECORDER.handled, RECORDER.done.is_set()
        if done and not announced:
            wire.send(event="done", handled=handled)
        elif handled != last:
            wire.send(event="progress", handled=handled)
        announced = done
        last = handled
        if done:
            time.sleep(PROGRESS_S)  # the event stays set until the next arm


def _commands() -> Any:
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def _ready(wire: Wire, a: argparse.Namespace, peer: str, version: str) -> None:
    wire.send(event="ready", peer=peer, version=version, role=a.role, pid=os.getpid())
    if a.role == "worker":
        threading.Thread(target=_progress, args=(wire,), daemon=True).start()


def _error(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).strip()[-2000:]


# ---------------------------------------------------------------------------------------------
# Asynchronous peers: the loop in the main thread, stdin read by a thread


async def _enqueue_async(peer: AsyncPeer, n: int, concurrency: int) -> float:
    left = itertools.count()

    async def pump() -> None:
        while next(left) < n:
            await peer.enqueue(0)

    t0 = time.perf_counter()
    await asyncio.gather(*(pump() for _ in range(max(1, concurrency))))
    return time.perf_counter() - t0


async def _paced_async(peer: AsyncPeer, n: int, rate: float) -> tuple[float, float]:
    tasks: list[asyncio.Task[None]] = []
    # At most PACED_IN_FLIGHT enqueues at once, within any client's connection pool; a job
    # that waits for a turn has its stamp already, so the wait counts in its latency.
    slots = asyncio.Semaphore(PACED_IN_FLIGHT)

    async def one(stamp: int) -> None:
        async with slots:
            await peer.enqueue(stamp)

    lag = 0.0
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        lag = max(lag, time.monotonic() - due)
        tasks.append(asyncio.create_task(one(time.monotonic_ns())))
    await asyncio.gather(*tasks)
    return time.monotonic() - t0, lag


def serve_async(
    make: Callable[[argparse.Namespace], AsyncPeer],
    peer: str,
    version: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    a = parse(extra)
    wire = Wire()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def read() -> None:
            for cmd in _commands():
                loop.call_soon_threadsafe(inbox.put_nowait, cmd)
            loop.call_soon_threadsafe(inbox.put_nowait, None)

        driver = make(a)
        await driver.open(a.role)
        threading.Thread(target=read, daemon=True).start()
        _ready(wire, a, peer, version)
        working: list[asyncio.Task[None]] = []

        def died(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                wire.send(event="error", error=_error(task.exception()))  # type: ignore[arg-type]

        while (cmd := await inbox.get()) is not None:
            op = cmd["op"]
            try:
                if op == "enqueue":
                    s = await _enqueue_async(driver, cmd["n"], cmd["concurrency"])
                    wire.send(reply=op, seconds=s)
                elif op == "paced":
                    s, lag = await _paced_async(driver, cmd["n"], cmd["rate"])
                    wire.send(reply=op, seconds=s, lag_ms=1000 * lag)
                elif op == "arm":
                    RECORDER.arm(cmd["expect"])
                    wire.send(reply=op)
                elif op == "go":
                    t_us = time.monotonic_ns() // 1000
                    if not working:
                        working.append(asyncio.create_task(driver.work()))
                        working[0].add_done_callback(died)
                    wire.send(reply=op, t_us=t_us)
                elif op == "report":
                    wire.send(reply=op, **RECORDER.report())
                elif op == "stop":
                    wire.send(reply=op)
                    wire.bye()
                else:
                    wire.send(reply=op, error=f"unknown op {op!r}")
            except Exception as e:  # noqa: BLE001 - the parent decides what a failure means
                wire.send(reply=op, error=_error(e))
        wire.bye()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Synchronous peers: the consuming loop in the main thread (RQ's job timeouts are SIGALRM,
# which only the main thread may set), the commands on a thread of their own


def _enqueue_sync(peer: SyncPeer, n: int, concurrency: int) -> float:
    left = itertools.count()  # next() on it is atomic under the GIL

    def pump() -> None:
        while next(left) < n:
            peer.enqueue(0)

    t0 = time.perf_counter()
    if concurrency <= 1:
        pump()
    else:
        threads = [threading.Thread(target=pump) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return time.perf_counter() - t0


def _paced_sync(peer: SyncPeer, n: int, rate: float) -> tuple[float, float]:
    lag = 0.0
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        lag = max(lag, time.monotonic() - due)
        peer.enqueue(time.monotonic_ns())
    return time.monotonic() - t0, lag


def serve_sync(
    make: Callable[[argparse.Namespace], SyncPeer],
    peer: str,
    version: str,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    a = parse(extra)
    wire = Wire()
    driver = make(a)
    driver.open(a.role)
    go = threading.Event()

    def control() -> None:
        for cmd in _commands():
            op = cmd["op"]
            try:
                if op == "enqueue":
                    wire.send(reply=op, seconds=_enqueue_sync(driver, cmd["n"], cmd["concurrency"]))
                elif op == "paced":
                    s, lag = _paced_sync(driver, cmd["n"], cmd["rate"])
                    wire.send(reply=op, seconds=s, lag_ms=1000 * lag)
                elif op == "arm":
                    RECORDER.arm(cmd["expect"])
                    wire.send(reply=op)
                elif op == "go":
                    go.set()
                    wire.send(reply=op, t_us=time.monotonic_ns() // 1000)
                elif op == "report":
                    wire.send(reply=op, **RECORDER.report())
                elif op == "stop":
                    wire.send(reply=op)
                    wire.bye()
                else:
                    wire.send(reply=op, error=f"unknown op {op!r}")
            except Exception as e:  # noqa: BLE001 - the parent decides what a failure means
                wire.send(reply=op, error=_error(e))
        wire.bye()

    threading.Thread(target=control, daemon=True).start()
    _ready(wire, a, peer, version)
    go.wait()
    try:
        driver.work()
    except BaseException as e:  # noqa: BLE001 - reported, then the process ends
        wire.send(event="error", error=_error(e))
        wire.bye()
    threading.Event().wait()  # a peer whose work() returns (e.g. started threads) idles here


def run_forever() -> Awaitable[None]:
    """For ``AsyncPeer.work`` of a peer whose consuming runs on tasks it started itself."""
    return asyncio.get_running_loop().create_future()
