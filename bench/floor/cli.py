"""The floor of this stack: the game's work done by the barest code on the game's parts.

    uv run python -m bench.bench_floor [--rates 300,1000,2000] [--duration 10] [--workers 2]
        [--players 200] [--sockets N] [--batch 64] [--warmup 2] [--schedule poisson|uniform]
        [--json OUT] [--quiet]

A guess in the game is an HTTP request that is authenticated, queued in Valkey, answered
``202``, popped by a worker, scored, written to SQLite, completed in Valkey and pushed to the
player's websocket. This benchmark does exactly those steps with nothing around them, on the
same libraries and settings, and prints the CPU each role spends per accepted guess. Those
figures are the physical limit of this stack on this machine, so the game's own figures
(``bench_game``) read best as ratios to them.

The processes, each measured from ``/proc/<pid>/stat`` from the first send until the drain ends:

- **web floor** (``python -m bench.bench_floor serve-web``): uvicorn with the game's settings
  (httptools, uvloop, websockets-sansio, the game's frame cap, no permessage-deflate, its
  ping interval and keep-alive) serving a bare ASGI callable. ``POST /api/guesses`` reads the
  body, decodes its JSON, looks the bearer token up in a dict, runs one EVALSHA (``HSET`` the
  job, ``LPUSH`` it) and answers ``202`` with ``{"job_id": …}``. It holds one websocket per
  player, subscribes to the scores channel and writes one text frame per scored guess.
- **worker floor** (``python -m bench.bench_floor work``, ``--workers`` of them): BLMPOP up to
  ``--batch`` jobs, scores them (Mastermind's exact/misplaced count), writes them in one
  SQLite transaction (``INSERT OR IGNORE`` into a table keyed on the job id; WAL, the
  default ``synchronous``, the game's busy timeout, as ``codemojex.store.db``), then one
  EVALSHA that deletes the batch's jobs from the hash and PUBLISHes the batch's scores.
- **Valkey**: the embedded server with the game's durability (``appendfsync always``).
- **load client**: this process. Open loop at each rate (the seeded schedule of
  ``bench_game``, whose keep-alive raw-HTTP pool it reuses), plus one websocket per player
  reading the scores on the websockets library's sans-I/O protocol.

What the floor omits, so that a ratio to it reads right (each is a guarantee or a feature
the game pays for): the door (admission, body deadlines, per-address and per-player
buckets, cross-site checks, the connection guard), routing and middleware (Starlette),
validation of the guess against the round, rounds and their closing, idempotency keys,
EchoMQ's job model (fair lanes, leases with fencing tokens and their renewals, retries,
dead letters, scheduled jobs, the events stream, progress counters), the standings upsert
in the score transaction and the single-writer lock between workers, the hub's broadcast
(progress messages to every socket), traces, metrics and logs. Completion and the score
publish share one script call here, and job ids are a per-process counter. PostgreSQL is
not covered: the floor is SQLite's.

Per rate it prints accepted/s and scored/s (within the window), accept→score p50/p99,
guesses per worker batch (from Valkey's ``HDEL`` count: one per completion), and CPU ms per
accepted guess for web, workers, Valkey, their sum (server) and the client, plus the cores
that processes not ours used meanwhile: on a shared machine the figures are only as quiet
as it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from pathlib import Path

from bench.common import (
    signals_raise_keyboardinterrupt,
)
from bench.floor.parts import WARMUP_RATE
from bench.floor.run import measure, print_table, runner
from bench.floor.web import serve_web
from bench.floor.worker import work


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench.bench_floor", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command")
    web = sub.add_parser("serve-web", help="(internal) the web floor process")
    web.add_argument("--redis-url", required=True)
    web.add_argument("--port", type=int, required=True)
    web.add_argument("--players", type=int, required=True)
    wk = sub.add_parser("work", help="(internal) a worker floor process")
    wk.add_argument("--redis-url", required=True)
    wk.add_argument("--db", required=True)
    wk.add_argument("--batch", type=int, required=True)
    ap.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")],
                    default=[300.0, 1000.0, 2000.0])  # fmt: skip
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0, help=f"s at {WARMUP_RATE:g}/s first")
    ap.add_argument("--connections", type=int, default=64, help="HTTP keep-alive, at most")
    ap.add_argument("--workers", type=int, default=2, help="as `up`'s default")
    ap.add_argument("--players", type=int, default=200)
    ap.add_argument("--sockets", type=int, default=None, help="players with a socket (all)")
    ap.add_argument("--batch", type=int, default=64, help="jobs per pop, transaction, completion")
    ap.add_argument("--schedule", choices=("poisson", "uniform"), default="poisson")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quiet", action="store_true")
    opts = ap.parse_args(argv)
    if opts.command is None:
        opts.sockets = opts.players if opts.sockets is None else min(opts.sockets, opts.players)
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.command == "serve-web":
        serve_web(opts.redis_url, opts.port, opts.players)
        return 0
    if opts.command == "work":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            runner()(work(opts.redis_url, opts.db, opts.batch))  # uvloop, as the game's workers
        return 0
    signals_raise_keyboardinterrupt()
    result = measure(opts)
    m = result["machine"]
    print_table(result["rows"], f"The floor: {m['cores']} cores, {m['cpu']}, Valkey {m['valkey']}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0
