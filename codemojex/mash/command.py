"""``codemojex mash``'s flags and entry point. Import-light: the CLI builds its parser from
here for every command, and the client machinery loads only when a mash runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", required=True, help="the game's base URL, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--players", type=int, default=200, help="honest players (200)")
    parser.add_argument("--mashers", type=int, default=10, help="keyboard mashers (10)")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of load, then the backlog drains (60)"
    )
    parser.add_argument(
        "--masher-rate",
        type=float,
        default=None,
        help="guesses per second per masher (default: as fast as accepted)",
    )
    parser.add_argument(
        "--masher-in-flight",
        type=int,
        default=8,
        metavar="N",
        help="requests each masher keeps in flight, closed loops that sleep Retry-After on "
        "429 and not on 503 (8)",
    )
    parser.add_argument(
        "--masher-addresses",
        type=int,
        default=0,
        metavar="K",
        help="send the mashers' requests and sockets from K loopback addresses, 127.0.0.2 "
        "and on, round robin, so a server on this machine sees K clients (0: the honest "
        "players' address)",
    )
    parser.add_argument(
        "--chaos-kill-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill a scoring worker this often (needs the admin token)",
    )
    parser.add_argument(
        "--admin-token",
        default=None,
        help="the admin token, for chaos and queue-depth samples (CODEMOJEX_ADMIN_TOKEN: "
        "better, a flag shows in ps)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="write results.json and report.html here (plots need matplotlib: the "
        "codemojex[report] extra)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed the players' choices")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="seconds the backlog may take to be scored after the load (60)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress")
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="how much to log (warning; CODEMOJEX_LOG_LEVEL)",
    )


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 nothing lost or doubled, 1 something was, 2 the run could not finish."""
    import asyncio
    import importlib.util
    import os
    import sys

    from rich.console import Console

    from codemojex.mash import MashOptions, run_mash
    from codemojex.mash.api import ApiError

    try:
        options = MashOptions(
            url=args.url,
            players=args.players,
            mashers=args.mashers,
            duration=args.duration,
            masher_rate=args.masher_rate,
            masher_in_flight=args.masher_in_flight,
            masher_addresses=args.masher_addresses,
            chaos_kill_every=args.chaos_kill_every,
            # From the environment rather than the command line, where ps shows it.
            admin_token=args.admin_token or os.environ.get("CODEMOJEX_ADMIN_TOKEN") or None,
            report=args.report,
            seed=args.seed,
            drain_timeout=args.drain_timeout,
            progress=not args.no_progress,
        )
    except ValueError as e:
        print(f"codemojex mash: {e}", file=sys.stderr)
        return 2
    if options.report is not None and importlib.util.find_spec("matplotlib") is None:
        print(
            "codemojex mash: the report will have no plots: matplotlib is not installed "
            "(pip install 'codemojex[report]')",
            file=sys.stderr,
        )
    try:
        result = asyncio.run(run_mash(options))
    except TimeoutError:
        print("codemojex mash: the run overran its hard deadline", file=sys.stderr)
        return 2
    except (ApiError, OSError) as e:
        print(f"codemojex mash: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # httpx's errors, one line each for the operator
        if type(e).__module__.startswith("httpx"):
            print(f"codemojex mash: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        raise
    console = Console(highlight=False, soft_wrap=True)
    for row in result.classes():
        if not row["submitted"]:
            continue
        share = row["accepted_share"]
        console.print(
            f"{row['class']:<7} accepted {row['accepted']:>7,} of {row['submitted']:,} "
            f"({100 * share:.1f} %, {row['accepted_per_s']}/s)  refused 429 "
            f"{row['refused_429']:,} (rate {row['rate_limited']:,})  503 overloaded "
            f"{row['overloaded_503']:,}  202→score p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms  "
            f"send→202 p99 {row['answer_p99_ms']} ms  send→score p99 "
            f"{row['click_to_score_p99_ms']} ms  (server: p50 {row['server_p50_ms']} ms, "
            f"p99 {row['server_p99_ms']} ms)  answers {row['statuses']}"
        )
    v = result.verdict
    console.print(
        f"reclaimed {v.reclaimed}, missed kills {v.missed_kills}, "
        f"unknown outcomes {v.unknown_outcomes}, drain {result.drain_s:.1f} s"
    )
    for problem in v.problems[:10]:
        console.print(f"  problem: {problem}")
    for note in v.notes[:10]:
        console.print(f"  note: {note}")
    if options.report is not None:
        console.print(f"report: {options.report / 'report.html'}")
    print(v.line(), flush=True)
    return result.exit_code
