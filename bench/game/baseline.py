"""What a run is compared with: an older revision's tree (``--baseline``), the floor
(``--floor``, bench/floor/) and the source state a run records."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.common import (
    ROOT,
)
from bench.game.options import Options, console
from bench.game.tables import fmt_num


@dataclass
class Tree:
    path: Path
    rev: str


@contextlib.contextmanager
def baseline_tree(rev: str, where: Path) -> Iterator[Tree]:
    """A detached ``git worktree`` of ``rev``, removed afterwards. Its ``codemojex`` runs
    with this environment's packages (uvicorn picks up httptools and uvloop wherever they
    are installed, so an older server gets them too)."""
    import subprocess

    root = ROOT
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(where), rev],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        short = subprocess.run(
            ["git", "rev-parse", "--short", rev],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield Tree(where, short)
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(where)],
            cwd=root,
            check=False,
            capture_output=True,
        )


def print_ratios(base: list[dict[str, Any]], now: list[dict[str, Any]], rev: str) -> None:
    """Per rate: the current figure, the baseline's, and current ÷ baseline."""
    t = Table(title=f"now vs {rev}, same run (ratio = now ÷ baseline)")
    for col in (
        "offered/s",
        "scored/s",
        "p50 ms",
        "p99 ms",
        "web ms/guess",
        "Σ workers ms/guess",
        "valkey ms/guess",
    ):
        t.add_column(col, justify="right")

    def cell(x: float | None, y: float | None, digits: int = 1) -> str:
        if x is None or y is None:
            return "-"
        ratio = f" ({x / y:.2f}×)" if y else ""
        return f"{fmt_num(x, digits)} vs {fmt_num(y, digits)}{ratio}"

    def ms(r: dict[str, Any], role: str) -> float | None:
        got = r["cpu"]["roles"].get(role)
        return None if got is None else float(got["ms_per_guess"])

    for b, n in zip(base, now, strict=False):
        t.add_row(
            fmt_num(n["offered_per_s"]),
            cell(n["scored_per_s"], b["scored_per_s"], 0),
            cell(n["accept_to_score_ms"]["p50"], b["accept_to_score_ms"]["p50"]),
            cell(n["accept_to_score_ms"]["p99"], b["accept_to_score_ms"]["p99"]),
            cell(ms(n, "web"), ms(b, "web"), 3),
            cell(ms(n, "worker"), ms(b, "worker"), 3),
            cell(ms(n, "valkey"), ms(b, "valkey"), 3),
        )
    console.print(t)


def measure_floor(a: argparse.Namespace, opts: Options) -> list[dict[str, Any]]:
    """bench_floor at this run's rates, duration, players and workers (its rows)."""
    from bench.floor.cli import parse
    from bench.floor.run import measure, print_table

    console.print("[bold]floor[/]: bench_floor at the same rates, players and workers")
    args = ["--rates", ",".join(f"{r:g}" for r in opts.rates), "--duration", f"{opts.duration:g}"]
    args += ["--players", str(opts.players), "--workers", str(a.workers)]
    args += ["--schedule", opts.schedule, *(["--quiet"] if not a.progress else [])]
    result = measure(parse(args))
    rows: list[dict[str, Any]] = result["rows"]
    print_table(rows, "floor: bench_floor, same run")
    return rows


def floor_ratios(floor: dict[str, Any], game: dict[str, Any]) -> dict[str, float | None]:
    """Each role's CPU ms per accepted guess in the game ÷ the floor's, and the server's."""

    def game_ms(role: str) -> float | None:
        got = game["cpu"]["roles"].get(role)
        return None if got is None else float(got["ms_per_guess"])

    out: dict[str, float | None] = {}
    for role in ("web", "worker", "valkey"):
        g, f = game_ms(role), float(floor["cpu"][role]["ms_per_guess"])
        out[role] = None if g is None or not f else g / f
    parts = [game_ms(r) for r in ("web", "worker", "valkey")]
    server = None if None in parts else sum(p for p in parts if p is not None)
    out["server"] = None if server is None else server / float(floor["server_ms_per_guess"])
    return out


def print_floor_ratios(floor: list[dict[str, Any]], rows: list[dict[str, Any]], title: str) -> None:
    """Per rate: each role's CPU per accepted guess, the game's and the floor's, game ÷ floor."""
    t = Table(title=f"{title}: the game vs its floor, same run (ratio = game ÷ floor)")
    for col in ("offered/s", "scored/s game / floor", "web", "Σ workers", "valkey", "server"):
        t.add_column(col, justify="right")
    for f, r in zip(floor, rows, strict=False):  # the same rates, in the same order
        ratio = floor_ratios(f, r)
        cells = []
        for role in ("web", "worker", "valkey"):
            got = r["cpu"]["roles"].get(role)
            g = "-" if got is None else f"{float(got['ms_per_guess']):.3f}"
            x = ratio[role]
            cells.append(f"{g} / {float(f['cpu'][role]['ms_per_guess']):.3f}" + (
                f" ({x:.2f}×)" if x is not None else ""))  # fmt: skip
        server = ratio["server"]
        cells.append("-" if server is None else f"{server:.2f}×")
        t.add_row(
            fmt_num(r["offered_per_s"]),
            f"{fmt_num(r['scored_per_s'], 0)} / {float(f['scored_per_s']):.0f}",
            *cells,
        )
    console.print(t)
    console.print("CPU in ms per accepted guess (game / floor); server = web + workers + valkey.")


def source_state() -> dict[str, Any]:
    """The commit measured, and the files changed beside it (others may be mid-edit)."""
    import subprocess

    root = ROOT

    def git(*args: str) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            ).stdout
        return ""

    return {
        "head": git("rev-parse", "--short", "HEAD").strip(),
        "changed": [
            line[3:]
            for line in git("status", "--porcelain").splitlines()
            if line[3:].endswith(".py") or line[3:].endswith(".lua")
        ],
    }
