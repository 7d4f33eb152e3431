"""Which SQL errors make the ScoreWorker wait (``echomq.Unavailable``) rather than fail a
guess (issue 21): real errors from a real SQLite file and a real, stopped or absent,
PostgreSQL; the 30 s outages under load are in tests/chaos/test_outages.py."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from codemojex.game import Game
from codemojex.rounds import Rounds
from codemojex.score_worker import ScoreWorker, unreachable
from harness.helpers import free_port


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


async def test_the_probe_waits_for_the_write_lock_and_answers_once_it_is_free(game: Game) -> None:
    """``ScoreWorker.probe`` (the consumer's probe while the database is down) needs what a
    score write needs: while another connection holds SQLite's write lock it does not
    return (a ``SELECT 1`` would: WAL readers pass an exclusive writer), and it returns
    the moment the lock is released."""
    path = str(game.config.sql_url).split("///", 1)[1]
    hog = sqlite3.connect(path, isolation_level=None)
    scorer = ScoreWorker(game.engine, game.rounds, "WRK_probe")
    try:
        hog.execute("BEGIN EXCLUSIVE")
        probe = asyncio.create_task(scorer.probe())
        await asyncio.sleep(0.5)
        assert not probe.done(), "the probe answered while the write lock was held"
        async with game.engine.connect() as conn:  # reads still go through
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
        hog.execute("ROLLBACK")
        await asyncio.wait_for(probe, 5)
        async with game.engine.connect() as conn:  # and it wrote nothing
            assert (await conn.execute(text("SELECT count(*) FROM scores"))).scalar() == 0
    finally:
        hog.close()


async def test_the_probe_raises_while_postgresql_refuses_and_answers_a_schema_error(
    tmp_path: Path,
) -> None:
    """Refused: still down, the probe raises. An error that is not an outage (here: no
    ``scores`` table at all) is an answer: the probe returns, and the handlers meet it."""
    refused = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/x")
    empty = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    try:
        with pytest.raises(Exception) as down:
            await ScoreWorker(refused, cast(Rounds, None), "WRK_probe").probe()
        assert unreachable(down.value)
        await ScoreWorker(empty, cast(Rounds, None), "WRK_probe").probe()
    finally:
        await refused.dispose()
        await empty.dispose()
