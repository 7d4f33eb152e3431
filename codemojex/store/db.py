"""Engines and migrations for the durable floor.

Two backends: SQLite through aiosqlite (the single-machine default, a file in the data
dir) and PostgreSQL through asyncpg. Get an engine with :func:`make_engine`, bring the
schema to head with :func:`migrate` (or :func:`migrate_async` from async code).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "SQLITE_FILENAME",
    "alembic_config",
    "make_engine",
    "migrate",
    "migrate_async",
    "migrations_dir",
    "normalize_url",
    "sqlite_url",
]

SQLITE_FILENAME = "codemojex.db"
SQLITE_BUSY_TIMEOUT_MS = 5000

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # codemojex/

# Alembic keeps the running migration's context in a module global, so two migrations
# in one process must not overlap (across processes, env.py takes a PostgreSQL lock).
_MIGRATE_LOCK = threading.Lock()


def normalize_url(url: str) -> str:
    """Map the URLs people write onto the async drivers we ship.

    ``sqlite:///f.db`` → ``sqlite+aiosqlite:///f.db``; ``postgres://`` and
    ``postgresql://`` → ``postgresql+asyncpg://``. Anything else is returned unchanged.
    """
    for plain, driver in (
        ("sqlite://", "sqlite+aiosqlite://"),
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


def sqlite_url(data_dir: str | Path) -> str:
    """The URL of the SQLite database file kept in ``data_dir``."""
    path = Path(data_dir).expanduser().resolve() / SQLITE_FILENAME
    return f"sqlite+aiosqlite:///{path}"


def make_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An :class:`AsyncEngine` for ``url`` (normalised), configured for its backend.

    SQLite: WAL (readers never block the writer), a 5 s busy timeout (concurrent writers
    wait for each other instead of failing), foreign keys enforced, and SQLAlchemy — not
    the sqlite3 module — emitting ``BEGIN`` so every transaction, reads included, is a
    real one. PostgreSQL: ``pool_pre_ping`` so a restarted server costs no failed request.
    Extra ``kwargs`` go to :func:`create_async_engine`.
    """
    url = normalize_url(url)
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        kwargs.setdefault("pool_pre_ping", True)
        return create_async_engine(url, **kwargs)
    engine = create_async_engine(url, **kwargs)
    if backend == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The sqlite3 module's legacy mode skips BEGIN before SELECTs, so a read-then-
        # write transaction would not be isolated. Turn it off; _on_begin emits BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching to WAL itself may have to wait for a lock.
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # A plain (deferred) BEGIN: write transactions here start with their write, so
        # they take the write lock (waiting up to busy_timeout) before reading anything.
        conn.exec_driver_sql("BEGIN")


def migrations_dir() -> Path:
    """Where the Alembic scripts live: packaged in the wheel, else the repo's copy."""
    packaged = _PACKAGE_DIR / "_migrations"
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic ``Config`` pointing at our scripts and at ``url`` (no ini file)."""
    from alembic.config import Config  # imported late: only migrating needs Alembic

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolates '%': escape it so URL-encoded passwords survive.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Upgrade the database at ``url`` to the newest schema (``alembic upgrade head``).

    Synchronous, and it runs its own event loop: from async code use
    :func:`migrate_async`. Safe to run on a database that is already at head.
    """
    from alembic import command

    with _MIGRATE_LOCK:
        command.upgrade(alembic_config(url), "head")


async def migrate_async(url: str) -> None:
    """:func:`migrate` in a worker thread, for callers inside an event loop."""
    await asyncio.to_thread(migrate, url)
