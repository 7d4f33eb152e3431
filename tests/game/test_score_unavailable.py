"""Which SQL errors make the ScoreWorker wait (``echomq.Unavailable``) rather than fail a
guess (issue 21): real errors from a real SQLite file and a real, stopped or absent,
PostgreSQL; the 30 s outages under load are in tests/chaos/test_outages.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from codemojex.score_worker import unreachable
from tests.helpers import free_port


async def test_sqlite_locked_past_its_busy_timeout_is_unreachable(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    hog = sqlite3.connect(path, isolation_level=None)
    hog.execute("PRAGMA journal_mode=WAL")
    hog.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    hog.execute("BEGIN EXCLUSIVE")
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}", connect_args={"timeout": 0.2})
    try:
        with pytest.raises(Exception) as locked:
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        assert "locked" in str(locked.value)
        assert unreachable(locked.value)
        hog.execute("ROLLBACK")
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(IntegrityError) as dup:  # a wrong write is no outage
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        assert not unreachable(dup.value)
        with pytest.raises(Exception) as missing:  # nor is a missing table
            async with engine.begin() as conn:
                await conn.execute(text("SELECT * FROM nowhere"))
        assert not unreachable(missing.value)
    finally:
        await engine.dispose()
        hog.close()


async def test_postgresql_refusing_connections_is_unreachable() -> None:
    engine = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/x")
    try:
        with pytest.raises(Exception) as refused:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT 1"))
        assert unreachable(refused.value)
    finally:
        await engine.dispose()
