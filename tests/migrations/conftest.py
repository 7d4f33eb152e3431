"""Fixtures for the durable-floor tests: a throwaway PostgreSQL, fresh databases, engines.

``engine`` is parametrized over both backends, so a test written once runs on SQLite and
on PostgreSQL (the saq pattern: behaviour tests per backend).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store import make_engine, migrate_async, sqlite_url

# tests/ is not a package; make `harness.pg` importable however pytest was started.
_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from harness.pg import PgCluster


@pytest.fixture(scope="session")
def pg_url(pg_cluster: PgCluster) -> str:
    """URL of the throwaway cluster's maintenance database (``postgres``)."""
    return pg_cluster.server_url


@pytest.fixture
def pg_database_url(pg_cluster: PgCluster) -> str:
    """URL of a fresh, empty PostgreSQL database for this test alone."""
    return pg_cluster.create_database()


@pytest.fixture
def sqlite_database_url(tmp_path: Path) -> str:
    """URL of a fresh SQLite file for this test alone (the file does not exist yet)."""
    return sqlite_url(tmp_path)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database on each backend in turn."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database_url"))
    return str(request.getfixturevalue("sqlite_database_url"))


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a fresh database migrated to head, on each backend in turn."""
    await migrate_async(database_url)
    eng = make_engine(database_url)
    try:
        yield eng
    finally:
        await eng.dispose()
