"""Where an idle consumer's end-to-end latency goes, by Valkey's ``appendfsync``. Prints
figures; it is not a test.

    uv run python -m bench.bench_wake [--jobs 2500] [--rate 500] [--rounds 3]
                                      [--modes always,everysec,no] [--no-bare]

The target is an e2e p99 of 2 ms at 500 jobs/s. This splits that latency in two, for a
parked consumer (``Consumer(concurrency=32, batch=32)`` on lanes, in this process) fed open
loop by a producer process (``--rate`` jobs/s over 100 lanes, each job stamped with
``CLOCK_MONOTONIC`` just before its enqueue call):

- **stamp → claimed**: the enqueue, its wake token, the BLPOP's answer and the claim
  script, up to the consumer's ``on_claim`` hook (a public hook: nothing is patched);
- **claimed → handler**: the consumer's own work before the handler starts (hand the claim
  to a slot, start the handler's task);
- **e2e**: the two together, what ``bench.compare`` reports;
- **bare hop**: the floor under all three, measured on the same server in the same round:
  the same producer schedule sending a bare ``LPUSH`` of its stamp, and this process taking
  each with ``BLPOP`` (redis-py, no queue at all). A job's e2e holds at least this one hop
  between two processes, so in a calm minute it is the lowest latency a queue could show
  on this machine at this rate. The two runs of a round are seconds apart, and a stall of
  a shared machine lands in one or the other: the p50s' ratio is the steady figure, the
  p99s' says which run a stall hit.

With ``appendfsync always`` Valkey fsyncs the append-only file before it answers any write,
and both halves of a wake write (the enqueue, then the claim): two fsyncs on every idle
job's path. The modes are interleaved, one fresh server per round and mode, and each figure
is the median over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import echomq
from bench.common import ROOT, embedded_server, server_cpu_seconds
from bench.compare.figures import latency_ms

LANES = 100
QUEUE = "wake"
BARE = "wake:bare"
HALVES = ("stamp_claimed", "claimed_handler", "e2e")


async def produce(url: str, jobs: int, rate: float, bare: bool = False) -> None:
    """Open loop: job ``i`` is due at ``i / rate`` s; a late one is sent at once, stamped
    when it is sent (its wait for a turn is the producer's, not the queue's). ``bare``
    sends the stamp alone with ``LPUSH`` instead of enqueueing a job. A call that finds
    every pooled connection busy (fsync on every write, ``always``) waits for one, inside
    its stamp."""
    q = echomq.Queue(echomq.connect(url, pool_timeout=30), QUEUE)
    lanes = itertools.cycle([f"L{i:03d}" for i in range(LANES)])
    await q.conn.ping()  # connected before the first stamp
    sent: list[asyncio.Future[Any]] = []
    t0 = time.monotonic()
    for i in range(jobs):
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if bare:
            sent.append(asyncio.ensure_future(q.conn.lpush(BARE, time.monotonic_ns())))
        else:
            payload = {"t": time.monotonic_ns()}
            sent.append(asyncio.ensure_future(q.lanes.enqueue(next(lanes), payload)))
    await asyncio.gather(*sent)
    await q.conn.aclose()


async def spent(conn: Any) -> dict[str, float]:
    """What the server has run so far: commands (less this call's own INFO), script µs
    (EVALSHA and EVAL) and CPU µs."""
    stats = await conn.info("commandstats")
    calls = sum(int(v.get("calls", 0)) for v in stats.values() if isinstance(v, dict))
    script_us = sum(
        float(stats.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in ("evalsha", "eval")
    )
    cpu_us = await server_cpu_seconds(conn) * 1e6
    return {
        "cmds": calls - int(stats.get("cmdstat_info", {}).get("calls", 0)),
        "script_us": script_us,
        "valkey_cpu_us": cpu_us,
    }


async def run_producer(url: str, jobs: int, rate: float, bare: bool) -> None:
    producer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_wake",
        "--produce",
        url,
        str(jobs),
        str(rate),
        *(["--bare"] if bare else []),
        cwd=ROOT,
    )
    if await producer.wait() != 0:
        raise RuntimeError(f"the producer exited {producer.returncode}")


async def bare_run(url: str, jobs: int, rate: float) -> list[int]:
    """Each stamp's trip (ns) from the producer process through one LPUSH and one BLPOP."""
    conn = echomq.connect(url)
    out: list[int] = []

    async def take() -> None:
        while len(out) < jobs:
            reply = await conn.blpop([BARE], timeout=5)
            if reply is None:
                raise RuntimeError(f"the bare hop went quiet after {len(out)} of {jobs}")
            out.append(time.monotonic_ns() - int(reply[1]))

    await conn.ping()
    taking = asyncio.ensure_future(take())
    try:
        await asyncio.sleep(0.5)  # parked on BLPOP before the first stamp, as the consumer is
        await run_producer(url, jobs, rate, bare=True)
        await asyncio.wait_for(taking, timeout=60)
    finally:
        taking.cancel()  # a producer that failed leaves it parked
        await asyncio.gather(taking, return_exceptions=True)
        await conn.aclose()
    return out


async def one_run(
    url: str, jobs: int, rate: float, tally: dict[str, float] | None = None
) -> dict[str, list[int]]:
    """Each job's three figures (ns), from one consumer fed by one producer process.
    ``tally`` gets what Valkey spent per job over the run: ``cmds`` (every command it ran,
    those the scripts ran inside included, as ``bench.compare`` counts them), ``script_us``
    (the script calls' own time, ``INFO commandstats``) and ``valkey_cpu_us``."""
    q = echomq.Queue(echomq.connect(url), QUEUE)
    claimed: dict[str, int] = {}
    out: dict[str, list[int]] = {h: [] for h in HALVES}
    done = asyncio.Event()

    def on_claim(claims: Sequence[echomq.Claim]) -> None:
        now = time.monotonic_ns()
        for c in claims:
            claimed[c.job_id] = now

    async def handler(claim: echomq.Claim) -> None:
        now = time.monotonic_ns()
        stamp, at = int(claim.payload["t"]), claimed.pop(claim.job_id)
        out["stamp_claimed"].append(at - stamp)
        out["claimed_handler"].append(now - at)
        out["e2e"].append(now - stamp)
        if len(out["e2e"]) == jobs:
            done.set()

    consumer = echomq.Consumer(
        q,
        handler,
        concurrency=32,
        batch=32,
        source="lanes",
        hooks=[echomq.Hooks(on_claim=on_claim)],
    )
    running = asyncio.ensure_future(consumer.run())
    try:
        await asyncio.sleep(0.5)  # parked on the wake key before the first job
        before = await spent(q.conn)
        await run_producer(url, jobs, rate, bare=False)
        await asyncio.wait_for(done.wait(), timeout=60)
        # read as the last handler starts: its one completion is left out of jobs' many
        after = await spent(q.conn)
        if tally is not None:
            tally.update({k: (after[k] - before[k]) / jobs for k in after})
    finally:
        consumer.stop()
        await running
        await q.conn.aclose()
    return out


def figures(run: dict[str, list[int]]) -> dict[str, float]:
    """p50, p90, p99 and max of each figure, in ms (``bench.compare``'s own figures)."""
    return {
        f"{half}_{q}": ms
        for half in run
        for q, ms in latency_ms([ns // 1000 for ns in run[half]]).items()
    }


async def round_on(
    url: str, jobs: int, rate: float, bare: bool, bare_first: bool
) -> dict[str, float]:
    """One round on one server: the queue's run and, if asked, the bare hop beside it (the
    two in alternating order from round to round, so neither always runs on a warmer
    server). Its figures, and what Valkey spent per job on the queue's run."""
    run: dict[str, list[int]] = {}
    tally: dict[str, float] = {}
    if bare and bare_first:
        run["bare"] = await bare_run(url, jobs, rate)
    run.update(await one_run(url, jobs, rate, tally))
    if bare and not bare_first:
        run["bare"] = await bare_run(url, jobs, rate)
    return figures(run) | tally


def measure(
    modes: Sequence[str],
    jobs: int,
    rate: float,
    rounds: int,
    progress: bool = True,
    bare: bool = True,
) -> dict[str, list[dict[str, float]]]:
    """Per mode, one figures dict per round; the modes interleaved, a fresh server each."""
    order = list(modes)
    out: dict[str, list[dict[str, float]]] = {m: [] for m in order}
    # Refreshed between runs only: a refresh thread would take the GIL from the consumer.
    with Progress(disable=not progress, transient=True, auto_refresh=False) as bar:
        task = bar.add_task("runs", total=rounds * len(order))
        for r in range(rounds):
            for mode in order[r % len(order) :] + order[: r % len(order)]:
                with embedded_server(mode) as server:
                    out[mode].append(
                        asyncio.run(round_on(server.url, jobs, rate, bare, r % 2 == 1))
                    )
                bar.advance(task)
                bar.refresh()
    return out


def table(results: dict[str, list[dict[str, float]]], jobs: int, rate: float) -> Table:
    base = next(reversed(results))  # the last mode given: the baseline of the ratios
    med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in results.items()}
    t = Table(
        title=f"An idle consumer's e2e latency by appendfsync: {jobs} jobs at {rate:g}/s, "
        f"medians of {len(next(iter(results.values())))} rounds (ms; × {base})"
    )
    t.add_column("appendfsync")
    for half in ("stamp → claimed", "claimed → handler", "e2e"):
        t.add_column(f"{half}\np50 / p99", justify="right")
    t.add_column(f"e2e × {base}\np50 / p99", justify="right")
    t.add_column("Valkey per job\ncmds / script µs / CPU µs", justify="right")
    bare = all("bare_p50" in m for m in med.values())
    if bare:
        t.add_column("bare hop\np50 / p99", justify="right")
        t.add_column("e2e × bare hop\np50 / p99", justify="right")
    for mode, m in med.items():
        cells = [f"{m[f'{h}_p50']:.2f} / {m[f'{h}_p99']:.2f}" for h in HALVES]
        r50 = m["e2e_p50"] / med[base]["e2e_p50"]
        r99 = m["e2e_p99"] / med[base]["e2e_p99"]
        cells.append(f"{r50:.2f}× / {r99:.2f}×")
        cells.append(f"{m['cmds']:.1f} / {m['script_us']:.0f} / {m['valkey_cpu_us']:.0f}")
        if bare:
            cells.append(f"{m['bare_p50']:.2f} / {m['bare_p99']:.2f}")
            # per round, then the median: the hop and the job ran on that round's server,
            # seconds apart
            rs = results[mode]
            b50 = statistics.median(r["e2e_p50"] / r["bare_p50"] for r in rs)
            b99 = statistics.median(r["e2e_p99"] / r["bare_p99"] for r in rs)
            cells.append(f"{b50:.2f}× / {b99:.2f}×")
        t.add_row(mode, *cells)
    return t


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=2500)
    p.add_argument("--rate", type=float, default=500.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default="always,everysec,no")
    p.add_argument(
        "--no-bare", action="store_true", help="skip the bare LPUSH → BLPOP hop beside each run"
    )
    p.add_argument("--produce", nargs=3, metavar=("URL", "JOBS", "RATE"), help=argparse.SUPPRESS)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.produce:
        url, jobs, rate = a.produce
        asyncio.run(produce(url, int(jobs), float(rate), bare=a.bare))
        return
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    results = measure(modes, a.jobs, a.rate, a.rounds, bare=not a.no_bare)
    Console().print(table(results, a.jobs, a.rate))


if __name__ == "__main__":
    main()
