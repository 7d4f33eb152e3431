"""A backend's cost per scored guess: the store's writes timed on SQLite and PostgreSQL, the
server's CPU beside them, and SQLite's commit rate."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from codemojex import rules
from codemojex.store import (
    GroupCommit,
    Round,
    ScoreRecord,
    create_player,
    hash_token,
    make_engine,
    migrate_async,
    record_score,
    record_scores,
    save_round,
)
from harness.legacy_scores import legacy_record_score

console = Console()
if not console.is_terminal:
    console = Console(width=150)

PLAYERS = 200
SECRET = ("🍎", "🍌", "🍇", "🍒")


@dataclass
class Figure:
    backend: str
    mode: str
    rows: int
    seconds: float
    cpu_s: float
    server_cpu_s: float | None = None
    mean_batch: float | None = None

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.rows if self.rows else 0.0


# --- the guesses -----------------------------------------------------------------------


class Guesses:
    """Fresh guesses of PLAYERS players, each mode in rounds of its own; every player's
    seq grows within a round, about one guess in eight solves."""

    def __init__(self) -> None:
        self.n = 0

    def make(self, round_id: str, count: int) -> list[ScoreRecord]:
        out = []
        seqs: dict[str, int] = {}
        for i in range(count):
            pid = f"PLR_{i % PLAYERS:04d}"
            seq = seqs.get(pid, 0)
            seqs[pid] = seq + 1
            solved = (i * 7919) % 8 == 0
            guess = SECRET if solved else ("🍑",) * 4
            fb = rules.feedback(SECRET, guess)
            self.n += 1
            at = 1_000_000 + self.n
            out.append(ScoreRecord(
                job_id=f"JOB_{self.n:026d}", round_id=round_id, player_id=pid, seq=seq,
                guess=guess, exact=fb.exact, near=fb.near, solved=fb.solved,
                points=rules.points_for(seq, fb.solved), accepted_at_ms=at,
                scored_at_ms=at + 3, attempts=1, worker_id="WRK_bench",
            ))  # fmt: skip
        return out


async def seed(engine: Any, rounds: int) -> None:
    for i in range(PLAYERS):
        pid = f"PLR_{i:04d}"
        await create_player(engine, f"p{i}", hash_token(pid), 1, player_id=pid)
    for r in range(rounds):
        await save_round(engine, Round(f"RND_{r:03d}", 4, rules.DEFAULT_PALETTE, SECRET, 0, 1))


# --- the modes -------------------------------------------------------------------------


def cluster_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds of a PostgreSQL postmaster and all its children (ours: nothing else)."""
    if pid is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        me = int(stat.parent.name)
        if me == pid or int(fields[1]) == pid:  # fields[1] is the ppid
            total += int(fields[11]) + int(fields[12])
    return total / tick


async def timed(
    backend: str,
    mode: str,
    rows: int,
    body: Callable[[], Awaitable[float | None]],
    server_pid: int | None,
) -> Figure:
    s0 = cluster_cpu_seconds(server_pid)
    c0, t0 = time.process_time(), time.perf_counter()
    mean_batch = await body()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    s1 = cluster_cpu_seconds(server_pid)
    server = s1 - s0 if s0 is not None and s1 is not None else None
    return Figure(backend, mode, rows, seconds, cpu, server, mean_batch)


async def run_backend(
    backend: str,
    url: str,
    rows: int,
    batches: Sequence[int],
    writers: int,
    progress: Progress,
    server_pid: int | None = None,
) -> list[Figure]:
    await migrate_async(url)
    engine = make_engine(url)
    modes = 3 + len(batches)
    guesses = Guesses()
    figures: list[Figure] = []
    try:
        await seed(engine, modes + 1)
        # Round 0 warms the pool, the compiled statements and the driver's prepared ones.
        await record_scores(engine, guesses.make("RND_000", 64))
        for r in guesses.make("RND_000", 16):
            await legacy_record_score(engine, r)
        rounds = (f"RND_{r:03d}" for r in range(1, modes + 1))
        task = progress.add_task(f"{backend}", total=rows * modes)

        round_legacy, round_one = next(rounds), next(rounds)

        async def legacy() -> None:
            for r in guesses.make(round_legacy, rows):
                await legacy_record_score(engine, r)
                progress.advance(task)

        async def one_by_one() -> None:
            for r in guesses.make(round_one, rows):
                await record_score(engine, r)
                progress.advance(task)

        figures.append(
            await timed(backend, "before: per guess (6 statements)", rows, legacy, server_pid)
        )
        figures.append(
            await timed(backend, "record_score (batch of 1)", rows, one_by_one, server_pid)
        )
        for size in batches:
            records = guesses.make(next(rounds), rows)

            async def batched(records: list[ScoreRecord] = records, size: int = size) -> None:
                for k in range(0, len(records), size):
                    await record_scores(engine, records[k : k + size])
                    progress.advance(task, len(records[k : k + size]))

            figures.append(
                await timed(backend, f"record_scores ×{size}", rows, batched, server_pid)
            )

        records = guesses.make(next(rounds), rows)
        group = GroupCommit(engine)

        async def grouped() -> float:
            it = iter(records)

            async def writer() -> None:
                for r in it:  # the writers share one iterator: each record once
                    await group.write(r)
                    progress.advance(task)

            await asyncio.gather(*(writer() for _ in range(writers)))
            await group.close()
            return group.records / max(group.batches, 1)

        figures.append(
            await timed(backend, f"GroupCommit, {writers} writers", rows, grouped, server_pid)
        )
    finally:
        await engine.dispose()
    return figures


def sqlite_commit_rate(path: Path, slices: int = 3) -> tuple[float, float]:
    """One-row transactions per second (median and best of 1 s slices), WAL, default
    synchronous: the fsync-bound limit of one writer on this disk."""
    conn = sqlite3.connect(path, isolation_level=None)
    rates = []
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER)")
        conn.execute("INSERT OR IGNORE INTO t VALUES (1, 0)")
        for _ in range(slices):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 1.0:
                conn.execute("BEGIN")
                conn.execute("UPDATE t SET v = v + 1 WHERE k = 1")
                conn.execute("COMMIT")
                n += 1
            rates.append(n / (time.perf_counter() - t0))
    finally:
        conn.close()
    return statistics.median(rates), max(rates)
