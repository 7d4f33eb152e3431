"""Fixtures shared by the whole suite: one real Valkey per session, a client per test.

Tests share the session server and isolate themselves by queue name (``queue_name``), never
by FLUSHALL. A test that needs to stop, kill or reconfigure a server starts its own
``EmbeddedValkey`` in ``tmp_path`` instead of touching this one.
"""

from __future__ import annotations

import compileall
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis.asyncio

from echomq.server import EmbeddedValkey
from harness.cluster import ValkeyCluster
from harness.pg import INSTALL_HINT, PgCluster, PgUnavailable

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # The suite starts hundreds of Python processes (`codemojex up`, its web and workers,
    # chaos children). Where PYTHONDONTWRITEBYTECODE is set none of them writes bytecode,
    # so each recompiled the project's modules it imported; elsewhere Python writes it
    # itself and nothing is done here. Written once, by the controller, before any worker
    # starts; the installed packages' bytecode comes from `uv sync` (compile-bytecode in
    # pyproject.toml).
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        for package in ("echomq", "codemojex", "web", "bench", "tests", "tools"):
            compileall.compile_dir(ROOT / package, quiet=1, workers=0)


# Files that take half a minute or more on one worker and would otherwise be sent among the
# last (xdist sends files in collection order, --no-loadscope-reorder): sent first, they
# overlap the rest; last, one worker ran tests/web/test_schema.py alone for its final 35 s.
SEND_FIRST = ("tests/web/test_schema.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def first(item: pytest.Item) -> bool:
        return item.nodeid.split("::")[0] in SEND_FIRST

    # A stable sort: every worker derives the same order, as xdist requires.
    items.sort(key=lambda item: not first(item))


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    """The session's real valkey-server, with the production durability dial.

    appendfsync "always" costs ~0.2 ms per write against ~0.09 ms for "everysec" on the dev
    machine (sequential round trips; pipelined the gap nearly vanishes), which is not enough
    to trade away testing what we ship.
    """
    with EmbeddedValkey(tmp_path_factory.mktemp("valkey"), appendfsync="always") as server:
        yield server


@pytest.fixture(scope="session")
def valkey_url(valkey_server: EmbeddedValkey) -> str:
    return valkey_server.url


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    """The session's real Valkey Cluster: three masters, no replicas (a test that kills a
    node starts its own ``ValkeyCluster``). Started only when a test asks for it."""
    cluster = ValkeyCluster(tmp_path_factory.mktemp("cluster"), masters=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def valkey_backend(request: pytest.FixtureRequest) -> str:
    """``"single"`` (the session server) or ``"cluster"`` (``valkey_cluster``): what
    ``redis_conn`` talks to. A module runs on both by listing itself in the
    ``VALKEY_BACKENDS`` of its package's conftest (see tests/echomq/conftest.py)."""
    return str(getattr(request, "param", "single"))


@pytest.fixture
async def redis_conn(
    valkey_backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[redis.asyncio.Redis]:
    """A fresh asyncio client (bytes in, bytes out) on the session server, or a
    ``RedisCluster`` on the session cluster, closed after."""
    conn: Any
    if valkey_backend == "cluster":
        conn = request.getfixturevalue("valkey_cluster").client(decode_responses=False)
    else:
        url = request.getfixturevalue("valkey_url")
        conn = redis.asyncio.Redis.from_url(url, decode_responses=False)
    try:
        yield conn
    finally:
        await conn.aclose()


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses, so tests never need to FLUSHALL."""
    return f"t{uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One throwaway PostgreSQL cluster for the whole session (migrations and chaos tests);
    fails in CI if PostgreSQL is missing, elsewhere skips naming the install command."""
    try:
        cluster = PgCluster.start()
    except PgUnavailable:
        if os.environ.get("CI") == "true":
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    try:
        yield cluster
    finally:
        cluster.stop()
