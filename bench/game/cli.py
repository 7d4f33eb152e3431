"""The game path's speed: open-loop guesses against ``codemojex up``; prints figures, asserts nothing.

    uv run python -m bench.bench_game [--rates 100,300,1000,2000] [--duration 10] [--workers 2]
        [--players 200] [--postgres | --database-url postgresql://…] [--up-arg=--concurrency=8]
        [--watchers N[,M…] [--watcher-processes K]] [--web-processes 1[,2]]
        [--json OUT] [--html OUT]

Starts a fresh ``codemojex up`` (embedded Valkey, SQLite unless told otherwise, N workers),
creates the players, opens one websocket per player, and offers each rate for ``--duration``
seconds, then waits (``--drain``) for the scores of every accepted guess. The load is open
loop: the send times come from a seeded schedule (Poisson or uniform) fixed before the window
starts, never from the answers, and each send goes to the next player in turn (or a random
one), so each player offers ``rate / players`` guesses a second.

The client is kept light so that its own CPU, printed beside the server's, stays a small
share, and its timing honest: one process on uvloop (if installed), raw HTTP/1.1 keep-alive
requests pre-encoded as bytes on a pool of connections (a send that finds none idle is
pipelined behind an unanswered request rather than delayed: the schedule holds, and the count
is printed), answers and websocket frames parsed in ``data_received`` (no task or future per
message; websockets' sans-I/O protocol, no ``Origin`` header) and timestamped there, only the
status line, ``Content-Length`` and the bodies of ``202`` and of errors looked at, websocket
messages decoded only when they are a ``score`` or a ``round``; no collector pause and no
refresh thread inside a window (the progress bars are redrawn from the loop).

Per guess it records the scheduled and actual send time, the answer's arrival and the
score's arrival on its owner's socket (matched by job id; a score may beat the ``202``).
Per rate: accepted/s and scored/s over the window, refusals by error code, accept→score
(``202`` received → score on the socket) percentiles, send→``202`` p99, the client's send
lag (past 5 ms p99 the arrivals were burstier than the schedule, and the report says so),
and CPU milliseconds per accepted guess for every process of ``up`` (web, each worker,
Valkey, the supervisor), a throwaway PostgreSQL (``--postgres``) and the client itself, read
from ``/proc/<pid>/stat`` from the first send until the drain ends, with each one's share of
a core during the load. On a shared machine the figures are only as quiet as the machine, so
it prints the CPU that processes not ours used, how long each main thread waited runnable for
a CPU (``/proc/<pid>/schedstat``), and the websocket traffic the players received.

``--watchers N`` holds a crowd: N more players whose sockets only read, from a client of
their own (``bench/watchers/``, one process per 5,000 by default, at most 2, on raw
asyncio protocols) so that its CPU is printed apart. They sign up (``up`` runs with
``CODEMOJEX_PLAYER_RATE=0``, ``CODEMOJEX_SOCKETS_PER_PROCESS=0`` and
``CODEMOJEX_SOCKETS_PER_ADDRESS=0``) and connect at a bounded concurrency before the first
window; then they send nothing but PONGs to the server's pings, and close 1000 at the end.
Per rate, beside the figures above: bytes and frames a second per watcher over the load
(mean, max over watchers; bytes as on the wire, frame headers included), frames a second all
watchers together, ``progress`` messages a second per watcher, the watchers the server
closed (by close code), the watcher processes' CPU (ms a second, share of a core), and the
web processes' resident set per socket: (VmRSS with the crowd connected − before it
connected) ÷ its sockets, idle before the first window and at the load's end.
``--watchers 0,9800`` and ``--web-processes 1,2`` take lists: every pair is a configuration,
measured in turn (everything above, each on its own fresh ``up``), web processes in the outer
loop and watchers in the inner one (1 web with 0 watchers, 1 web with 9,800, 2 web with 0,
2 web with 9,800), and printed side by side with each one's ratio to the first
("1 web, 0 watchers"): web CPU per guess, accept→score p50/p99 and scored/s with and without
a crowd, read off one run. When any configuration has a crowd, every one runs with the
crowd's ``CODEMOJEX_*`` settings, so that the crowd is all that differs; a configuration with
0 watchers starts no watcher process and leaves the crowd's figures blank.

When a rate's backlog does not drain in time, the next rate runs on a fresh ``up`` so one
rate's queue never leaks into the next. A round that closes mid-window is followed (the
``round`` message, or a ``409 round_closed`` that refetches it); use ``--round-seconds`` to
keep closes rare.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import orjson

from bench.common import (
    machine,
    signals_raise_keyboardinterrupt,
)
from bench.game.baseline import (
    baseline_tree,
    measure_floor,
    print_floor_ratios,
    print_ratios,
    source_state,
)
from bench.game.measure import run
from bench.game.options import WATCHERS_PER_PROCESS, Options, console, up_env, watcher_processes
from bench.game.report_html import write_html
from bench.game.server import up_args
from bench.game.tables import print_side_by_side, print_tables
from bench.watchers.watcher import raise_nofile

try:  # the client's loop; the server's processes choose their own
    import uvloop
except ImportError:  # pragma: no cover - a dependency on Linux
    uvloop = None  # type: ignore[assignment]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_game",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--rates",
        default="100,300,1000,2000",
        help="offered guesses/s, comma-separated (100,300,1000,2000)",
    )
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per rate (10)")
    p.add_argument(
        "--drain",
        type=float,
        default=30.0,
        help="seconds to wait for the last scores after each rate (30)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="seconds at a low rate before the first rate, not recorded (2)",
    )
    p.add_argument("--players", type=int, default=200, help="players, one socket each (200)")
    p.add_argument(
        "--connections",
        type=int,
        default=64,
        help="keep-alive connections at most (64; fewer at low rates)",
    )
    p.add_argument("--schedule", choices=["poisson", "uniform"], default="poisson")
    p.add_argument(
        "--pick",
        choices=["round-robin", "random"],
        default="round-robin",
        help="which player sends each guess (round-robin)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2, help="ScoreWorker processes (2)")
    p.add_argument(
        "--round-seconds",
        type=int,
        default=600,
        help="round length, long enough that a sweep seldom crosses a close (600)",
    )
    p.add_argument("--database-url", help="run against this database (postgresql://…)")
    p.add_argument(
        "--postgres",
        action="store_true",
        help="start a throwaway PostgreSQL cluster and run against it",
    )
    p.add_argument(
        "--up-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `codemojex up` flags, e.g. --up-arg=--concurrency=8 (repeatable)",
    )
    p.add_argument(
        "--up-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a CODEMOJEX_* variable for `up`, e.g. --up-env CODEMOJEX_PLAYER_RATE=0 for more "
        "players than one address may sign up (repeatable)",
    )
    p.add_argument(
        "--fresh-each-rate",
        action="store_true",
        help="a fresh up for every rate (by default only after one that did not drain)",
    )
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure the server at git revision REV (a temporary worktree), "
        "each rate right before the current code, and print the ratios",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="also measure bench_floor (the barest code on the same parts) at the same rates, "
        "players and workers, first, and print each role's figure as a ratio to it",
    )
    p.add_argument(
        "--watchers",
        default="0",
        metavar="N[,M…]",
        help="N extra players whose sockets only read (bench/watchers/, their own "
        "process), all connected before the first window (0); several (0,9800) measure "
        "each crowd in turn, each on its own up, crossed with --web-processes (for each "
        "web-processes value, each watchers value) and printed side by side",
    )
    p.add_argument(
        "--watcher-processes",
        type=int,
        default=0,
        metavar="K",
        help=f"processes the watchers are spread over (0: one per {WATCHERS_PER_PROCESS:,}, "
        "at most 2)",
    )
    p.add_argument(
        "--watcher-concurrency",
        type=int,
        default=64,
        help="watcher sockets being opened at once, in all (64)",
    )
    p.add_argument(
        "--web-processes",
        metavar="N[,M…]",
        help="`codemojex up --web-processes N`; several (1,2) measure each configuration "
        "in turn, each on its own up, and print them side by side (default: up's own, 1)",
    )
    p.add_argument("--json", metavar="OUT", help="write every figure as JSON to OUT")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML report to OUT")
    p.add_argument(
        "--via",
        choices=("http", "socket"),
        default="http",
        help="how guesses are sent: POST /api/guesses on keep-alive connections, or a guess "
        "frame on the player's own websocket (answered by an accepted/error frame)",
    )
    p.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")
    a = p.parse_args(argv)
    for name in ("watchers", "web_processes"):
        text = getattr(a, name)
        if text is None:
            continue
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        low = 0 if name == "watchers" else 1
        if not values or min(values) < low:
            p.error(f"--{name.replace('_', '-')}: integers ≥ {low}, comma-separated: {text!r}")
    return a


def int_list(text: str | None) -> list[int]:
    """``0,9800`` → [0, 9800] (an option ``parse`` has checked)."""
    return [int(x) for x in (text or "").split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    opts = Options(
        rates=[float(r) for r in a.rates.split(",") if r.strip()],
        duration=a.duration,
        drain=a.drain,
        warmup=a.warmup,
        players=a.players,
        connections=a.connections,
        schedule=a.schedule,
        pick=a.pick,
        seed=a.seed,
        fresh_each_rate=a.fresh_each_rate,
        progress=a.progress,
        watcher_processes=a.watcher_processes,
        watcher_concurrency=a.watcher_concurrency,
        via=a.via,
    )
    webs: list[int | None] = list(int_list(a.web_processes)) or [None]
    crowds = int_list(a.watchers) or [0]
    # every (web processes, watchers) pair in turn: web processes outer, watchers inner
    plan = [(web, replace(opts, watchers=n)) for web in webs for n in crowds]
    # with a crowd anywhere, every configuration gets its settings: only the crowd differs
    env = up_env(opts, crowd=max(crowds) > 0)
    for item in a.up_env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("CODEMOJEX_"):
            raise SystemExit(f"--up-env {item!r}: NAME=VALUE with a CODEMOJEX_ name")
        env[name] = value
    # up and its web processes inherit the limit: a crowd needs a descriptor per socket
    nofile = raise_nofile()
    db = "PostgreSQL (throwaway)" if a.postgres else ("PostgreSQL" if a.database_url else "SQLite")

    def title_of(web: int | None, o: Options) -> str:
        crowd = f" + {o.watchers:,} watchers" if o.watchers else ""
        return f"codemojex up {' '.join(up_args(a, web))} — {db}, {a.players} players{crowd}"

    m = machine()
    src = source_state()
    top = max(opts.rates, default=0) / max(1, opts.players)
    crowd_note = ", then ".join(
        f"{n:,} (in {watcher_processes(replace(opts, watchers=n))} process(es))" if n else "0"
        for n in crowds
    )
    console.print(
        f"[bold]{title_of(*plan[0])}[/]; guesses over {opts.via}; {opts.schedule} arrivals, "
        f"{opts.duration:g} s per "
        f"rate; at most {top:.1f} guesses/s per player; client loop: "
        f"{'uvloop' if uvloop else 'asyncio'}; source {src['head']}"
        + (f" + uncommitted changes to {len(src['changed'])} files" if src["changed"] else "")
        + (f"; watchers {crowd_note}, open files {nofile:,}" if max(crowds) > 0 else "")
        + (f"; web processes {', '.join(map(str, webs))} in turn" if len(webs) > 1 else "")
    )
    started = time.monotonic()
    runner = uvloop.run if uvloop else asyncio.run
    floor_rows = measure_floor(a, opts) if a.floor else None
    configs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cmx-bench-game-") as tmp:
        try:
            for k, (web, o) in enumerate(plan):
                title = title_of(web, o)
                base_rows: list[dict[str, Any]] | None = None
                if len(plan) > 1:
                    console.print(f"[bold]configuration {k + 1} of {len(plan)}[/]: {title}")
                if a.baseline:
                    with baseline_tree(a.baseline, Path(tmp) / f"baseline{k}") as tree:
                        console.print(
                            f"[bold]baseline[/]: the server at {a.baseline} "
                            f"({tree.rev}), same client, same machine"
                        )
                        (Path(tmp) / f"b{k}").mkdir()
                        base_rows = runner(
                            run(a, o, Path(tmp) / f"b{k}", title, tree.path, web, env)
                        )
                (Path(tmp) / f"c{k}").mkdir()
                rows = runner(run(a, o, Path(tmp) / f"c{k}", title, None, web, env))
                configs.append(
                    {
                        "name": f"{web or 1} web, {o.watchers:,} watchers",
                        "web_processes": web or 1,
                        "watchers": o.watchers,
                        "title": title,
                        "up_args": up_args(a, web),
                        "up_env": env,
                        "rows": rows,
                        "baseline": {"rev": a.baseline, "rows": base_rows},
                    }
                )
        except KeyboardInterrupt:
            console.print("[red]interrupted: every `up` was stopped")
            return 130
    for c in configs:
        if c["baseline"]["rows"] is not None:
            print_tables(c["baseline"]["rows"], f"{c['title']} — baseline {a.baseline}")
        print_tables(c["rows"], c["title"])
        if c["baseline"]["rows"] is not None:
            print_ratios(c["baseline"]["rows"], c["rows"], a.baseline)
    if floor_rows is not None:
        for c in configs:
            print_floor_ratios(floor_rows, c["rows"], c["title"])
    if len(configs) > 1:
        print_side_by_side(configs)
    console.print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB, kernel "
        f"{m['kernel']}, Python {m['python']}; load average {m['loadavg_1m']:.2f} "
        f"at start, {os.getloadavg()[0]:.2f} at the end (the client shares these "
        f"cores); total {time.monotonic() - started:.0f} s"
    )
    first = configs[0]
    result = {
        "title": first["title"],
        "machine": m,
        "loadavg_end": os.getloadavg(),
        # the first configuration's (its watchers); each one's are in configs
        "options": asdict(plan[0][1]),
        "up_args": first["up_args"],
        "database": db,
        "source": src,
        # the first configuration's, as before --web-processes and --watchers took lists
        "rows": first["rows"],
        "baseline": first["baseline"],
        # every configuration, in the order measured (web processes outer, watchers inner;
        # one unless --web-processes or --watchers is a list), each with its name,
        # web_processes, watchers, up_args, up_env, rows and baseline
        "configs": configs,
        # bench_floor's rows at the same rates (--floor), measured first in this run
        "floor": floor_rows,
    }
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        console.print(f"figures written to {a.json}")
    if a.html:
        write_html(Path(a.html), result)
        console.print(f"report written to {a.html}")
    return 0
