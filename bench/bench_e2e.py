"""End-to-end benchmark of the whole game: prints figures, it is not a test.

    uv run python -m bench.bench_e2e [--duration 30] [--workers 2] [--players 50] [--json OUT]

Starts a fresh ``codemojex up`` (embedded Valkey, SQLite, N workers) for each scenario and
runs ``codemojex mash`` against it through the public HTTP and WebSocket API:

  (a) honest players only, fair lanes;
  (b) the same honest players + 10 mashers, fair lanes;
  (c) the same as (b) with ``up --fifo``: one queue for every guess, first come first served.

For each: accepted guesses/s, acceptance-to-score latency (the ``202`` answer to the score on
the player's socket, one client clock) p50/p99 per class, the deepest queue seen, and the
verdict (every accepted guess scored exactly once). "honest p99 server" is the same guesses'
time from JOB id mint to completion event on the server's clocks: queueing and scoring,
without the push to the socket or the client's own delays. Then the fairness figure: honest
p99 with mashers ÷ honest p99 without (target ≤ 2× with lanes; reported, not asserted). The
client shares the machine with the server, so the figures describe this machine, printed
at the end.

Rounds are shortened (``--round-seconds 20``) so honest players, who stop after a solve until
the next round, keep guessing through the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from bench.common import machine, signals_raise_keyboardinterrupt
from codemojex.mash import MashOptions, run_mash
from codemojex.mash.run import MashResult
from harness.running import Up

# Wide enough for the table when the output goes to a file or a pipe.
console = Console() if sys.stdout.isatty() else Console(width=180)

SCENARIOS: list[tuple[str, str, bool, bool]] = [  # key, title, mashers?, fifo?
    ("a", "honest only, lanes", False, False),
    ("b", "honest + mashers, lanes", True, False),
    ("c", "honest + mashers, fifo", True, True),
]


def _class(result: MashResult, kind: str) -> dict[str, Any]:
    return next(c for c in result.classes() if c["class"] == kind)


def figures(key: str, title: str, result: MashResult) -> dict[str, Any]:
    honest, masher = _class(result, "honest"), _class(result, "masher")
    return {
        "scenario": key,
        "title": title,
        "accepted": result.ledger.accepted,
        "accepted_per_s": round(result.ledger.accepted / result.load_s, 1),
        "scored_per_s": round(result.ledger.scored / (result.load_s + result.drain_s), 1),
        "honest_accepted": honest["accepted"],
        "honest_p50_ms": honest["p50_ms"],
        "honest_p99_ms": honest["p99_ms"],
        "masher_accepted": masher["accepted"],
        "masher_p50_ms": masher["p50_ms"],
        "masher_p99_ms": masher["p99_ms"],
        "honest_server_p99_ms": honest["server_p99_ms"],
        "masher_server_p99_ms": masher["server_p99_ms"],
        "refused_429": sum(result.ledger.refused.values()),
        "max_pending": max((s.pending for s in result.queue), default=None),
        "drain_s": round(result.drain_s, 1),
        "verdict": result.verdict.line(),
        "ok": result.verdict.ok,
    }


def run_scenario(
    a: argparse.Namespace, key: str, title: str, mashers: bool, fifo: bool
) -> dict[str, Any]:
    up_args = ["--workers", str(a.workers), "--round-seconds", str(a.round_seconds)]
    if a.score_delay_ms:
        up_args += ["--score-delay-ms", str(a.score_delay_ms)]
    if a.prefetch is not None:
        up_args += ["--prefetch", str(a.prefetch)]
    if fifo:
        up_args.append("--fifo")
    up_args += a.up_arg
    with tempfile.TemporaryDirectory(prefix="cmx-bench-") as tmp:
        up = Up(Path(tmp) / "data", *up_args)
        try:
            up.start().wait_ready(60)
            console.print(
                f"[bold]({key}) {title}[/]: codemojex up {' '.join(up_args)}; "
                f"mash {a.players} honest, {a.mashers if mashers else 0} mashers, "
                f"{a.duration:g} s"
            )
            result = asyncio.run(
                run_mash(
                    MashOptions(
                        url=up.base,
                        players=a.players,
                        mashers=a.mashers if mashers else 0,
                        duration=a.duration,
                        masher_rate=a.masher_rate,
                        admin_token=up.admin_token,
                        seed=a.seed,
                        drain_timeout=a.drain_timeout,
                        progress=a.progress,
                        report=Path(a.reports) / key if a.reports else None,
                        name_prefix=f"bench{key}",
                    )
                )
            )
            up.stop()
        finally:
            up.kill_everything()
    out = figures(key, title, result)
    console.print(f"    {out['verdict']}")
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if not top or not bottom else round(top / bottom, 2)


def print_table(a: argparse.Namespace, rows: list[dict[str, Any]], m: dict[str, Any]) -> None:
    delay = f", score delay {a.score_delay_ms} ms" if a.score_delay_ms else ""
    t = Table(
        title=f"codemojex end to end — {a.workers} workers{delay}, {a.players} honest "
        f"players, {a.mashers} mashers, {a.duration:g} s per scenario"
    )
    for col in (
        "scenario",
        "accepted/s",
        "scored/s",
        "honest p50 ms",
        "honest p99 ms",
        "masher p50 ms",
        "masher p99 ms",
        "honest p99 server",
        "429s",
        "max pending",
        "drain s",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("scenario", "verdict") else "right")
    for r in rows:
        t.add_row(
            f"({r['scenario']}) {r['title']}",
            f"{r['accepted_per_s']:,}",
            f"{r['scored_per_s']:,}",
            _ms(r["honest_p50_ms"]),
            _ms(r["honest_p99_ms"]),
            _ms(r["masher_p50_ms"]),
            _ms(r["masher_p99_ms"]),
            _ms(r["honest_server_p99_ms"]),
            f"{r['refused_429']:,}",
            "-" if r["max_pending"] is None else f"{r['max_pending']:,}",
            f"{r['drain_s']}",
            "ok" if r["ok"] else "[red]" + r["verdict"],
        )
    console.print(t)
    by = {r["scenario"]: r for r in rows}
    base = by.get("a", {})
    for key, what in (("b", "with lanes"), ("c", "with one FIFO")):
        if key in by:
            ratio = _ratio(by[key]["honest_p99_ms"], base.get("honest_p99_ms"))
            server = _ratio(by[key]["honest_server_p99_ms"], base.get("honest_server_p99_ms"))
            console.print(
                f"honest p99 with {a.mashers} mashers ÷ without, {what}: "
                f"[bold]{ratio}×[/]"
                + (" (target ≤ 2×)" if key == "b" else "")
                + f"; server side only: {server}×"
            )
    console.print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB, "
        f"kernel {m['kernel']}, Python {m['python']}, load average "
        f"{m['loadavg_1m']:.2f} at start (the client shares these cores)"
    )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load each (30)")
    p.add_argument("--workers", type=int, default=2, help="ScoreWorker processes (2)")
    p.add_argument("--players", type=int, default=50, help="honest players (50)")
    p.add_argument("--mashers", type=int, default=10, help="mashers in (b) and (c) (10)")
    p.add_argument(
        "--masher-rate",
        type=float,
        default=None,
        help="cap each masher at this many guesses/s (default: none)",
    )
    p.add_argument("--round-seconds", type=int, default=20)
    p.add_argument(
        "--score-delay-ms",
        type=int,
        default=0,
        help="make each score take this long on the server (heavy scoring)",
    )
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="guesses each worker leases ahead of its free handlers (up's default)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="abc", help="scenarios to run, e.g. ab (abc)")
    p.add_argument(
        "--up-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `codemojex up` flags for every scenario, e.g. --up-arg=--guess-rate=0",
    )
    p.add_argument("--reports", metavar="DIR", help="a mash report per scenario in DIR/<key>")
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    p.add_argument(
        "--quiet", dest="progress", action="store_false", help="no live progress during each run"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    m = machine()
    started = time.monotonic()
    rows = []
    try:
        for key, title, mashers, fifo in SCENARIOS:
            if key in a.only:
                rows.append(run_scenario(a, key, title, mashers, fifo))
    except KeyboardInterrupt:
        console.print("[red]interrupted: every `up` was stopped")
        return 130
    print_table(a, rows, m)
    console.print(f"total {time.monotonic() - started:.0f} s")
    if a.json:
        Path(a.json).write_bytes(
            orjson.dumps({"machine": m, "args": vars(a), "rows": rows}, option=orjson.OPT_INDENT_2)
        )
        console.print(f"figures written to {a.json}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
