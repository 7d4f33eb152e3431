"""Small helpers shared by the test suite (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def sql_write_locked(where: str | Path) -> Iterator[None]:
    """SQLite's write lock on the file ``where`` names (a path or a ``sqlite:///`` URL),
    held by the caller: the server's writes wait for it (up to their busy timeout), as
    behind a slow database."""
    path = where.partition(":///")[2] if isinstance(where, str) and ":///" in where else where
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()


async def slow_request(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, Any]:
    """A whole ``POST /api/players`` from ``source``: under :func:`sql_write_locked` it holds
    its place at the door until the lock goes (a body that never comes holds none: the door
    reads it first)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    body = b'{"name": "Slow"}'
    writer.write(
        b"POST /api/players HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    return reader, writer
