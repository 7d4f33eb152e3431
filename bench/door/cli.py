"""The door under mashers: honest players' latency and share accepted, alone and beside
closed-loop mashers, on the server's own core, and what a refusal costs the web; prints
figures, asserts nothing.

    uv run python -m bench.bench_door
        [--rows 0:0,10:same,50:same,200:20:spread,200:20,replay:5,0:0] [--duration 8]
        [--players 100] [--honest-rate 30] [--masher-in-flight 8] [--masher-procs 0]
        [--up-arg=--workers=2] [--server-rev REV] [--nginx] [--no-pin] [--no-costs]
        [--json OUT]

Starts one ``codemojex up`` (defaults: embedded Valkey, SQLite, 2 workers; rounds of an
hour, so none closes mid-row) **pinned to CPU 0** (``up`` is started with that affinity and
forks every child from it; each row checks every server process's ``Cpus_allowed_list``)
while this process and the masher processes it starts run on CPU 1, so a row shows the
server and not its wait for the load's CPU. ``--server-rev REV`` runs the server of another
revision (a temporary ``git worktree``) under the same clients; ``--nginx`` sends every
row through Debian's nginx with compose's config (``harness.nginx``; on CPU 0 too, the web
trusting its ``X-Forwarded-For``), counted as the server's. It creates the honest
players from 127.0.0.1 and opens a socket each, then runs every row of ``--rows`` on the
same server:

* **honest load**, from this process: ``--honest-rate`` guesses a second in all, open loop
  (Poisson send times, each to a random player with nothing in flight), one attempt each;
  per guess the send, the answer and its score on the owner's socket are timestamped. In
  a ``:spread`` row each player's guesses come from one of the mashers' addresses.
* **mashers** (``N:same``: from the honest players' address; ``N:K``: from 127.0.0.2 …
  127.0.0.K+1), from processes of their own (one per 100 mashers, ``--masher-procs``):
  each masher signs up, opens a socket (its scores counted per job) and runs
  ``--masher-in-flight`` closed loops on raw keep-alive HTTP/1.1 connections, sleeping
  ``Retry-After`` on 429 and not on 503, as fast as the answers come; afterwards every
  accepted guess must have been scored once on its socket and be stored completed with a
  score (``lost``, ``doubled``). The honest figures of the row are those sent while the
  mashers' load ran. Rows ``0:0`` are the honest players alone (first and last by
  default), and every ratio is to their median, from the same run.
* **the replay loop** (row ``replay:K``): the issue's one player from an address of its
  own (127.0.0.250) reconnecting K sockets in a loop with ``after=0``, each reading its
  greeting and replay, then closing; placed after the masher rows, whose guesses filled
  the events stream (its length is printed).

Then the **cost of an answer** to the web process (its CPU from ``/proc/<pid>/stat``,
user + system, over a burst of each kind, idle CPU of the same length subtracted): an
accepted guess (players at an honest pace), a ``429`` the bucket mirror answers without
Valkey (a player over its rate that ignores ``Retry-After``), and a ``503 overloaded`` at
the per-address bound (requests from an address whose bound is held by slow requests).

Per row: honest send→score and send→202 p50/p99 (and their ratio to alone; and the p99
leaving out the window's first 3 s, when every masher's connections and first requests
arrive at once), honest guesses accepted (of those sent), honest non-202 answers, the
mashers' answers by status, the CPU of both sides (the server's processes, and this
process with the masher processes) as a share of a core and as CPU ms per guess accepted
in the row, and the mashers' verdict line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from rich.console import Console

from bench.common import ROOT, machine
from bench.door.mash import masher_child
from bench.door.options import CLIENT_CPU, ROUND_SECONDS, ROWS, SERVER_CPU, Options, parse_rows
from bench.door.rows import measure
from bench.door.tables import print_tables
from bench.door.trace import game_pids, pinning
from harness.running import Up, descendants

if TYPE_CHECKING:
    from harness.nginx import Nginx


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=ROWS, help=f"mashers:addresses,… ({ROWS})")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per row (8)")
    p.add_argument("--players", type=int, default=100, help="honest players (100)")
    p.add_argument("--honest-rate", type=float, default=30.0, help="honest guesses a second (30)")
    p.add_argument("--masher-in-flight", type=int, default=8, help="requests per masher (8)")
    p.add_argument(
        "--up-arg",
        action="append",
        default=[],
        help="an extra `up` flag, e.g. --up-arg=--door-in-flight=32",
    )
    p.add_argument("--cost-requests", type=int, default=600, help="answers per cost burst (600)")
    p.add_argument(
        "--masher-procs", type=int, default=0, help="masher processes a row (0: one per 100)"
    )
    p.add_argument("--no-costs", action="store_true", help="skip the cost of an answer")
    p.add_argument(
        "--no-pin",
        action="store_true",
        help=f"leave the processes where the kernel puts them (default: the server on CPU "
        f"{SERVER_CPU}, this process and its mashers on CPU {CLIENT_CPU})",
    )
    p.add_argument(
        "--server-rev",
        default=None,
        metavar="REV",
        help="run the server of git revision REV (a temporary worktree), this bench's clients",
    )
    p.add_argument(
        "--nginx",
        action="store_true",
        help="send every row through Debian's nginx with compose's config "
        "(harness/nginx.py), on the server's CPU",
    )
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    opts = Options(
        rows=parse_rows(a.rows),
        duration=a.duration,
        players=a.players,
        honest_rate=a.honest_rate,
        masher_in_flight=a.masher_in_flight,
        up_args=a.up_arg,
        cost_requests=a.cost_requests,
        progress=not a.no_progress,
        door_slots=_door_slots(a.up_arg),
        masher_procs=a.masher_procs,
        costs=not a.no_costs,
        pin=not a.no_pin,
        nginx=a.nginx,
        server_rev=a.server_rev,
        json=a.json,
    )
    return opts


def _door_slots(up_args: list[str]) -> int:
    for arg in up_args:
        if arg.startswith("--door-in-flight="):
            return int(arg.split("=", 1)[1])
    return 16


def start_pinned(up: Up, pin: bool) -> tuple[int, int] | None:
    """Start ``up`` on :data:`SERVER_CPU` (it forks every child from there, so they all run
    on it) and keep this process, and the masher processes it starts, on
    :data:`CLIENT_CPU`; on a machine with fewer than two CPUs, leave both where they are."""
    if not pin or len(os.sched_getaffinity(0)) < 2:
        up.start()
        return None
    os.sched_setaffinity(0, {SERVER_CPU})
    try:
        up.start()
    finally:
        os.sched_setaffinity(0, {CLIENT_CPU})
    return SERVER_CPU, CLIENT_CPU


def start_nginx(stack: contextlib.ExitStack, up: Up, cpus: tuple[int, int] | None) -> Nginx:
    """nginx with compose's config in front of the web, on the server's CPU when pinned."""
    from harness.nginx import running_nginx

    if cpus is not None:
        os.sched_setaffinity(0, {cpus[0]})
    try:
        return stack.enter_context(running_nginx([("127.0.0.1", up.port)]))
    finally:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[1]})


def nginx_pids(master: int) -> dict[str, int]:
    out = {"nginx": master}
    for i, pid in enumerate(sorted(descendants(master))):
        out[f"nginx{i + 1}"] = pid
    return out


def check_pinned(up: Up, cpus: tuple[int, int] | None, proxy: dict[str, int] | None = None) -> None:
    """Every server process on its CPU, or say which is not (a benchmark then measures the
    client's share of the server's core)."""
    if cpus is None:
        return
    server = game_pids(up) | (proxy or {})
    wrong = {r: c for r, c in pinning(server).items() if c != str(cpus[0])}
    if wrong:
        raise SystemExit(f"server processes not on CPU {cpus[0]}: {wrong}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["masher-child"]:
        return masher_child(Path(argv[1]), Path(argv[2]))
    opts = parse(argv)
    console = Console(highlight=False, width=200)
    with tempfile.TemporaryDirectory(prefix="bench-door-") as tmp, contextlib.ExitStack() as stack:
        root = ROOT
        if opts.server_rev:
            from bench.game.baseline import baseline_tree

            root = stack.enter_context(baseline_tree(opts.server_rev, Path(tmp) / "server")).path
        # Behind nginx the web takes the client's address from its X-Forwarded-For.
        trust = ["--forwarded-allow-ips", "127.0.0.1"] if opts.nginx else []
        up = Up(
            Path(tmp) / "data",
            *("--round-seconds", str(ROUND_SECONDS), *trust, *opts.up_args),
            root=root,
        )
        try:
            cpus = start_pinned(up, opts.pin)
            up.wait_ready(60)
            proxy: dict[str, int] = {}
            if opts.nginx:
                nginx = start_nginx(stack, up, cpus)
                opts.front_port = nginx.port
                proxy = nginx_pids(nginx.proc.pid)
            check_pinned(up, cpus, proxy)
            result = asyncio.run(measure(opts, up, Path(tmp), list(proxy.items())))
            check_pinned(up, cpus, proxy)
        finally:
            with contextlib.suppress(Exception):
                up.stop()
            up.kill_everything()
    result |= {"options": asdict(opts), "machine": machine(), "pin": cpus, "nginx": opts.nginx}
    print_tables(result, console)
    if opts.json is not None:
        opts.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))
    return 0
