"""The printed tables: per backend, the drains, the latencies."""

from __future__ import annotations

from rich import box
from rich.table import Table

from bench.store.backend import Figure
from bench.store.drain import Drain
from bench.store.latency import Latency


def latency_table(rows: list[Latency], procs: int, seconds: float) -> Table:
    t = Table(box=box.SIMPLE_HEAVY, title=(
        f"GroupCommit write latency: {procs} processes, open loop, {seconds:.0f} s per rate"
    ))  # fmt: skip
    for col in ("backend", "offered/s", "p50 ms", "p99 ms", "max ms", "CPU ms/guess",
                "mean batch"):  # fmt: skip
        t.add_column(col, justify="left" if col == "backend" else "right")
    for r in rows:
        n = sum(c["n"] for c in r.children)
        t.add_row(
            r.backend, f"{r.rate:,.0f}",
            f"{1000 * max(c['p50'] for c in r.children):.1f}",
            f"{1000 * max(c['p99'] for c in r.children):.1f}",
            f"{1000 * max(c['max'] for c in r.children):.1f}",
            f"{1000 * sum(c['cpu_s'] for c in r.children) / n:.3f}",
            f"{sum(c['batch'] for c in r.children) / len(r.children):.1f}",
        )  # fmt: skip
    t.caption = "Latency: scheduled time -> commit; the worse of the processes' percentiles."
    return t


# --- output ----------------------------------------------------------------------------


def table(figures: list[Figure], commit_rate: tuple[float, float]) -> Table:
    t = Table(box=box.SIMPLE_HEAVY, title="ScoreWorker SQL write: rows/s and CPU per guess")
    for col in ("backend", "mode", "rows/s", "× rows/s", "CPU ms/guess", "× CPU",
                "server CPU ms/guess", "mean batch"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("backend", "mode") else "right")
    base: dict[str, Figure] = {}
    for f in figures:
        b = base.setdefault(f.backend, f)
        t.add_row(
            f.backend, f.mode, f"{f.rate:,.0f}", f"{f.rate / b.rate:.1f}×",
            f"{f.cpu_ms:.3f}", f"{b.cpu_ms / f.cpu_ms:.1f}× less" if f is not b else "1.0×",
            "-" if f.server_cpu_s is None else f"{1000 * f.server_cpu_s / f.rows:.3f}",
            "-" if f.mean_batch is None else f"{f.mean_batch:.1f}",
        )  # fmt: skip
    t.caption = (
        "SQLite physical limit (sqlite3, one-row commits, WAL, fsync): "
        f"{commit_rate[0]:,.0f} commits/s median of 1 s slices, best {commit_rate[1]:,.0f}.\n"
        "CPU = this process, all threads (aiosqlite's included); ratios against the first "
        "row of each backend, measured in the same run."
    )
    return t


def drain_table(drains: list[Drain], procs: int) -> Table:
    t = Table(box=box.SIMPLE_HEAVY,
              title=f"{procs} codemojex worker processes draining accepted guesses")  # fmt: skip
    cols = ("backend", "concurrency", "scored/s", "worker CPU ms/guess (all workers)",
            "Valkey CPU ms/guess", "PostgreSQL CPU ms/guess")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "backend" else "right")
    for d in drains:
        t.add_row(
            d.backend, str(d.concurrency), f"{d.rate:,.0f}",
            f"{1000 * d.worker_cpu_s / d.rows:.3f}", f"{1000 * d.valkey_cpu_s / d.rows:.3f}",
            "-" if d.sql_cpu_s is None else f"{1000 * d.sql_cpu_s / d.rows:.3f}",
        )  # fmt: skip
    t.caption = "From the first completion to the last: worker start-up is left out."
    return t
