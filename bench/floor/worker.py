"""The worker floor: a batch per pop, per transaction, per completion."""

from __future__ import annotations

import sqlite3
from typing import cast

import orjson
import redis.asyncio as aioredis

from bench.floor.parts import COMPLETE, JOBS, QUEUE, SCORES, SECRET
from codemojex.store.db import SQLITE_BUSY_TIMEOUT_MS


def mastermind(secret: tuple[str, ...], guess: list[str]) -> tuple[int, int]:
    """(right emoji in the right place, right emoji in the wrong place)."""
    exact = sum(a == b for a, b in zip(secret, guess, strict=False))
    common = sum(min(secret.count(e), guess.count(e)) for e in set(guess))
    return exact, common - exact


def open_db(path: str) -> sqlite3.Connection:
    """The game's SQLite settings (codemojex.store.db): WAL, its busy timeout, explicit BEGIN."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute(
        "CREATE TABLE IF NOT EXISTS scores (job_id TEXT PRIMARY KEY, player TEXT NOT NULL,"
        " guess TEXT NOT NULL, exact INTEGER NOT NULL, near INTEGER NOT NULL)"
    )
    return db


async def work(redis_url: str, db_path: str, batch: int) -> None:
    conn = aioredis.from_url(redis_url)
    sha = await conn.script_load(COMPLETE)
    db = open_db(db_path)
    print("READY", flush=True)
    while True:
        got = await conn.blmpop(1, 1, QUEUE, direction="RIGHT", count=batch)
        if not got:
            continue
        rows, scores = [], []
        for raw in cast(list[bytes], got[1]):
            job_id, player, guess = orjson.loads(raw)
            exact, near = mastermind(SECRET, guess)
            rows.append((job_id, player, "".join(guess), exact, near))
            scores.append((player, job_id, exact, near))
        # In the loop's thread: nothing else is waiting on this loop while it commits.
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO scores VALUES (?, ?, ?, ?, ?)", rows)
        db.execute("COMMIT")
        ids = [r[0] for r in rows]
        await conn.evalsha(sha, 2, JOBS, SCORES, orjson.dumps(scores), *ids)
