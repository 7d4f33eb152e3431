"""Small helpers shared by the repository modules."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, Select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


def upsert_insert(conn: AsyncConnection, table: Any) -> Any:
    """The backend's own ``INSERT`` construct, which has ``on_conflict_do_*``.

    Idempotency rests on ``ON CONFLICT``, which has no portable spelling; SQLite and
    PostgreSQL happen to share the same SQLAlchemy API for it.
    """
    # Imported here: the PostgreSQL dialect costs ~60 ms of import in every process, and a
    # SQLite deployment never needs it (the engine has loaded its own dialect already).
    name = conn.dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    if name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)
    raise NotImplementedError(f"the durable floor supports sqlite and postgresql, not {name}")


async def first_row(
    engine: AsyncEngine, stmt: Select[*tuple[Any, ...]]
) -> Row[*tuple[Any, ...]] | None:
    """The first row ``stmt`` selects, or None, on a connection of its own."""
    async with engine.connect() as conn:
        return (await conn.execute(stmt)).first()


def dump_list(items: Sequence[str]) -> str:
    # ensure_ascii=False keeps emojis readable in the database (both backends are UTF-8).
    return json.dumps(list(items), ensure_ascii=False)


def load_list(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))
