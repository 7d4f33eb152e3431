"""One peer's round on the shared Valkey: enqueue, drain, end-to-end latency, each phase's
Valkey commands (INFO commandstats deltas) and the worker's CPU. Also EchoMQ lanes drained by
several worker processes at once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.compare.driver import Driver, DriverError
from bench.compare.figures import drain_rates, latency_ms
from bench.compare.pins import Peer

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class Setup:
    url: str
    jobs: int  # N: enqueued (half one at a time, half 10 at once), then drained
    e2e_jobs: int  # jobs of the open-loop latency run
    rate: float  # its enqueue rate, jobs/s
    concurrency: int  # each worker's jobs in flight (what each peer calls it: see its driver)
    logs: Path


def server_commands(conn: redis.Redis) -> int:
    """Every command Valkey has run so far, those that scripts ran inside included (INFO
    commandstats counts a script's ``redis.call``s under their own names, and the EVALSHA)."""
    stats: dict[str, Any] = conn.info("commandstats")
    return sum(int(v.get("calls", 0)) for v in stats.values() if isinstance(v, dict))


def server_cpu_seconds(conn: redis.Redis) -> float:
    cpu: dict[str, Any] = conn.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class Counter:
    """Commands Valkey ran, and its CPU seconds, between two marks; the INFO calls of each
    mark are left out (a mark's own INFO shows only in the next one's stats)."""

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn
        self.last = server_commands(conn)
        self.cpu = server_cpu_seconds(conn)

    def take(self) -> int:
        now, cpu = server_commands(self.conn), server_cpu_seconds(self.conn)
        delta, self.last = now - self.last - 2, now
        self.spent, self.cpu = cpu - self.cpu, cpu
        return delta


def _wait(
    workers: list[Driver], total: int, phase: str, progress: Progress, timeout: float
) -> None:
    """Until the workers together have handled ``total`` jobs."""
    deadline = time.monotonic() + timeout
    while True:
        handled = sum(w.handled for w in workers)
        progress(phase, handled, total)
        if (len(workers) == 1 and workers[0].done) or handled >= total:
            return
        if time.monotonic() > deadline:
            raise DriverError(f"{phase}: {handled}/{total} handled after {timeout:.0f} s")
        for w in workers:
            w.pump(0.05 / len(workers))


def _driver(peer: Peer, python: Path, role: str, s: Setup, queue: str, tag: str) -> Driver:
    args = ["--role", role, "--url", s.url, "--queue", queue]
    args += ["--concurrency", str(s.concurrency), *peer.args]
    return Driver(python, peer.module, args, s.logs / f"{peer.key}-{tag}.log")


def _drain_timeout(n: int) -> float:
    return max(120.0, n / 50)  # the slowest peer here drains ~150/s on a busy machine


def one_round(
    conn: redis.Redis, peer: Peer, python: Path, s: Setup, progress: Progress
) -> dict[str, Any]:
    """Every figure of one peer, one round. Valkey is flushed first."""
    conn.flushall()
    queue = f"cmp-{peer.key}"
    load = os.getloadavg()[0]
    single, many = s.jobs // 2, s.jobs - s.jobs // 2
    with _driver(peer, python, "producer", s, queue, "producer") as producer:
        count = Counter(conn)
        progress("enqueue single", 0, s.jobs)
        t_single = producer.ask("enqueue", _drain_timeout(single), n=single, concurrency=1)
        progress("enqueue 10 concurrent", single, s.jobs)
        t_many = producer.ask("enqueue", _drain_timeout(many), n=many, concurrency=10)
        enqueue_cmds = count.take()
        with _driver(peer, python, "worker", s, queue, "worker") as worker:
            worker.ask("arm", expect=s.jobs)
            count.take()  # the worker's start-up (connections, groups) is not a job's cost
            go = worker.ask("go")
            _wait([worker], s.jobs, "drain", progress, _drain_timeout(s.jobs))
            drain_cmds = count.take()
            drain_valkey_cpu = count.spent
            drained = worker.ask("report")
            if drained["handled"] < s.jobs:
                raise DriverError(f"{peer.key}: {drained['handled']} of {s.jobs} jobs handled")
            # Handler runs past N by the report: jobs run twice (a redelivery), not an error of
            # the instrument; the rates count the first N runs.
            extra = drained["handled"] - s.jobs
            steady, whole = drain_rates(drained["times_us"][: s.jobs], int(go["t_us"]))

            worker.ask("arm", expect=s.e2e_jobs)
            progress("e2e", 0, s.e2e_jobs)
            paced = producer.ask("paced", s.e2e_jobs / s.rate + 120, n=s.e2e_jobs, rate=s.rate)
            _wait([worker], s.e2e_jobs, "e2e", progress, 120.0)
            e2e = worker.ask("report")
    lat = latency_ms(e2e["latency_us"])
    return {
        "version": worker.version or peer.version,
        "loadavg_1m": load,
        "drain_steady_per_s": steady,
        "drain_total_per_s": whole,
        "enqueue_single_per_s": single / t_single["seconds"],
        "enqueue_10_per_s": many / t_many["seconds"],
        "e2e_p50_ms": lat["p50"],
        "e2e_p99_ms": lat["p99"],
        "e2e_max_ms": lat["max"],
        "e2e_enqueue_lag_ms": paced["lag_ms"],
        "cmds_enqueue_per_job": enqueue_cmds / s.jobs,
        "cmds_drain_per_job": drain_cmds / s.jobs,
        "worker_cpu_us_per_job": 1e6 * drained["cpu_s"] / s.jobs,
        "valkey_cpu_us_per_job": 1e6 * drain_valkey_cpu / s.jobs,
        "extra_runs": extra + max(0, e2e["handled"] - s.e2e_jobs),
    }


def multi_round(
    conn: redis.Redis,
    peer: Peer,
    python: Path,
    s: Setup,
    procs: int,
    ceiling: float,
    progress: Progress,
) -> dict[str, Any]:
    """``procs`` worker processes draining N jobs enqueued beforehand (10 at once)."""
    conn.flushall()
    queue = f"cmp-{peer.key}-x{procs}"
    load = os.getloadavg()[0]
    with _driver(peer, python, "producer", s, queue, "producer") as producer:
        progress(f"enqueue for x{procs}", 0, s.jobs)
        producer.ask("enqueue", _drain_timeout(s.jobs), n=s.jobs, concurrency=10)
    workers: list[Driver] = []
    try:
        for i in range(procs):
            workers.append(_driver(peer, python, "worker", s, queue, f"worker{i}"))
        for w in workers:
            w.ask("arm", expect=s.jobs)
        count = Counter(conn)
        gos = [int(w.ask("go")["t_us"]) for w in workers]
        _wait(workers, s.jobs, f"drain x{procs}", progress, _drain_timeout(s.jobs))
        drain_cmds = count.take()
        reports = [w.ask("report") for w in workers]
    finally:
        for w in workers:
            w.close()
    handled = sum(int(r["handled"]) for r in reports)
    if handled < s.jobs:
        raise DriverError(f"{peer.key} x{procs}: {handled} of {s.jobs} jobs handled")
    times = [t for r in reports for t in r["times_us"]]
    steady, whole = drain_rates(times, min(gos))
    return {
        "procs": procs,
        "loadavg_1m": load,
        "drain_steady_per_s": steady,
        "drain_total_per_s": whole,
        "cmds_drain_per_job": drain_cmds / s.jobs,
        "share_of_ceiling": steady / ceiling,
        "per_worker": [int(r["handled"]) for r in reports],
        "extra_runs": handled - s.jobs,
    }
