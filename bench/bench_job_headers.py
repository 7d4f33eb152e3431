"""What job headers cost: prints figures, it is not a test.

    uv run python -m bench.bench_job_headers [--revs REV,REV] [--jobs N] [--rounds R]

One ``valkey-server`` (AOF, appendfsync everysec), and for each git revision in ``--revs``
(default: the commit before job headers and the commit that added them) that revision's
``lane_enqueue`` and ``lane_claim`` scripts, plus the newest one again with a traceparent
header on every job. Each round runs, for every variant in turn, N sequential enqueues of
a guess-sized payload onto 50 lanes, then N single claims; the figures are the medians
over rounds of the server's own time per call (``INFO commandstats`` usec_per_call,
reset before each phase) and the client's wall time per call. Then the Python side, with
``timeit`` (best of interleaved passes): decoding a claim row without headers, the checks of ``headers=None``, and the
tracing hooks when tracing is off. Then ``MEMORY USAGE`` of a job row without and with a
traceparent.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import subprocess
import time
import timeit
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench.common import embedded_server
from echomq.codec import dumps
from echomq.jobs import claim_keys, encode_headers
from echomq.keys import Keys
from echomq.scripts import Runner, Script
from echomq.types import Claim

ROOT = Path(__file__).resolve().parent.parent
BEFORE, ADDED = "b8feb65^", "b8feb65"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PAYLOAD = {"player_id": "PLR_01M8PME4234WHYYAH3CS6GQDBH", "round_id": "RND_01M8PME4234W",
           "guess": ["🍎", "🍌", "🍒", "🍇"]}  # fmt: skip
LANES = 50


def script_at(rev: str, name: str) -> Script:
    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:echomq/lua/{path}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    lines = []
    for line in show(f"{name}.lua").splitlines():
        if line.startswith("--@include "):
            lines.append(show(f"include/{line.split()[1]}.lua"))
        else:
            lines.append(line)
    source = "\n".join(lines) + "\n"
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


async def usec_per_call(conn: Any) -> float:
    stats = await conn.info("commandstats")
    return float(stats.get("cmdstat_evalsha", {}).get("usec_per_call", 0.0))


async def one_round(
    conn: Any, run: Runner, q: str, enq: Script, claim: Script, headers: bytes, jobs: int
) -> tuple[float, float, float, float]:
    keys = Keys(q)
    body = dumps(PAYLOAD)
    await conn.config_resetstat()
    t0 = time.perf_counter()
    for i in range(jobs):
        lane = f"p{i % LANES}"
        jid = f"JOB_{q}_{i:08d}"
        await run.run(
            enq,
            keys.script_keys("lane_enqueue", keys.job(jid), keys.lane(lane),
                             keys.seq(lane, "r"), keys.dedup(""), keys.rate("")),
            [jid, lane, body, 5, 0, 0, 1, 60_000, 0, "", "", 0, 0, 0, headers],
        )  # fmt: skip
    enq_wall = (time.perf_counter() - t0) / jobs * 1e6
    enq_server = await usec_per_call(conn)
    await conn.config_resetstat()
    t0 = time.perf_counter()
    for _ in range(jobs):
        args: list[str | int] = ["w", 60_000, 1, 100, "", 0]
        reply = await run.run(claim, claim_keys(keys, "claim", args), args)
        assert len(reply) == 3
    claim_wall = (time.perf_counter() - t0) / jobs * 1e6
    return enq_server, enq_wall, await usec_per_call(conn), claim_wall


async def scripts(revs: list[str], jobs: int, rounds: int) -> None:
    variants = [(rev, b"") for rev in revs] + [(revs[-1], dumps({"traceparent": TRACEPARENT}))]
    loaded = {rev: (script_at(rev, "lane_enqueue"), script_at(rev, "lane_claim")) for rev in revs}
    figures: dict[int, list[tuple[float, float, float, float]]] = {}
    with embedded_server("everysec") as server:
        conn = aioredis.Redis.from_url(server.url)
        run = Runner(conn)
        try:
            for r in range(rounds):
                for v, (rev, headers) in enumerate(variants):
                    enq, claim = loaded[rev]
                    got = await one_round(conn, run, f"b{r}v{v}", enq, claim, headers, jobs)
                    figures.setdefault(v, []).append(got)
                await conn.flushall()
            jid = "JOB_mem"
            await conn.hset(jid, mapping={"id": jid, "lane": "p", "payload": dumps(PAYLOAD),
                            "max": 5, "attempts": 0, "failures": 0, "stalls": 0,
                            "enq": 1796055961695, "state": "pending", "seq": 0})  # fmt: skip
            without = await conn.memory_usage(jid)
            await conn.hset(jid, "headers", dumps({"traceparent": TRACEPARENT}))
            with_tp = await conn.memory_usage(jid)
        finally:
            await conn.aclose()
    print(f"\nscripts: {jobs} sequential calls per phase, median of {rounds} rounds")
    print(f"{'variant':44} {'enqueue µs srv/wall':>22} {'claim µs srv/wall':>22}")
    for v, (rev, headers) in enumerate(variants):
        cols = list(zip(*figures[v], strict=True))
        es, ew, cs, cw = (statistics.median(c) for c in cols)
        label = f"{rev} {'with a traceparent' if headers else 'no headers'}"
        print(f"{label:44} {es:>10.2f} / {ew:>8.1f}  {cs:>10.2f} / {cw:>8.1f}")
    print(f"\njob row MEMORY USAGE: {without} B without headers, {with_tp} B with a traceparent")


def python_side() -> None:
    from codemojex import tracing

    tracing.use(None)  # tracing off, as by default
    row8 = [b"JOB_x", b"p1", dumps(PAYLOAD), 1, 123, b"0", b"1796055961695", b"0"]
    row9 = [*row8, b""]

    async def handler(claim: Claim) -> None:
        return None

    cases: list[tuple[str, Any]] = [
        ("Claim.from_reply, 8 fields (before)", lambda: Claim.from_reply(row8)),
        ("Claim.from_reply, 9 fields, no headers", lambda: Claim.from_reply(row9)),
        ("encode_headers(None)", lambda: encode_headers(None)),
        ("tracing.enabled() (off)", tracing.enabled),
        ("with tracing.enqueueing(...) (off)", lambda: _enter(tracing.enqueueing("l", "p", "r"))),
        ("with tracing.span('score') (off)", lambda: _enter(tracing.span("score"))),
        ("tracing.traced(handler) (off)", lambda: tracing.traced(handler, worker_id="w", lease_ms=1)),
    ]  # fmt: skip
    best = dict.fromkeys((label for label, _ in cases), float("inf"))
    for _ in range(5):  # passes interleaved, so a busy moment of the machine hits all cases
        for label, fn in cases:
            best[label] = min(best[label], timeit.timeit(fn, number=100_000) / 100_000 * 1e9)
    print("\npython, tracing off (best of 5 passes x 100,000 calls)")
    for label, ns in best.items():
        print(f"{label:44} {ns:8.0f} ns")


def _enter(cm: Any) -> None:
    with cm:
        pass


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_job_headers", description=__doc__)
    p.add_argument("--revs", default=f"{BEFORE},{ADDED}", help="git revisions to compare")
    p.add_argument("--jobs", type=int, default=5_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    asyncio.run(scripts(a.revs.split(","), a.jobs, a.rounds))
    python_side()


if __name__ == "__main__":
    main()
