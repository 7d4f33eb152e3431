"""Fixtures of the chaos suite: a private real Valkey per test (``appendfsync always``), a
freshly migrated SQLite file per test, a throwaway PostgreSQL for the session (when the
binaries exist), the fork server that spawns worker processes, and the figures recorder.

Sizes: short by default (CI); the issue's full sizes with ``CODEMOJEX_CHAOS_FULL=1`` (or
``--chaos-full`` when ``tests/chaos`` is named on the command line; see ``harness.FULL``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from codemojex import store
from codemojex.config import Config
from codemojex.game import Game
from echomq.server import EmbeddedValkey
from harness.pg import PgCluster
from tests.chaos import harness


def pytest_addoption(parser: pytest.Parser) -> None:
    # Registered only when this conftest is loaded at start-up (tests/chaos on the command
    # line); from the repository root use CODEMOJEX_CHAOS_FULL=1 instead.
    parser.addoption(
        "--chaos-full",
        action="store_true",
        default=False,
        help="run the chaos suite at its full sizes (= CODEMOJEX_CHAOS_FULL=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        full = bool(config.getoption("--chaos-full"))
    except ValueError:
        full = False
    if full:
        os.environ["CODEMOJEX_CHAOS_FULL"] = "1"
        harness.FULL = True


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """This test's own valkey-server, durable like production; tests kill and restart it."""
    with EmbeddedValkey(tmp_path / "valkey", appendfsync="always") as server:
        yield server


@pytest.fixture
async def sql_url(tmp_path: Path) -> str:
    url = store.sqlite_url(tmp_path / "sql")
    (tmp_path / "sql").mkdir()
    await store.migrate_async(url)
    return url


@pytest.fixture
async def pg_url(pg_cluster: PgCluster) -> str:
    url = pg_cluster.create_database()
    await store.migrate_async(url)
    return url


def make_config(valkey_url: str, database_url: str, data_dir: Path, **changes: object) -> Config:
    base: dict[str, object] = {
        "valkey_url": valkey_url,
        "database_url": database_url,
        "data_dir": data_dir,
        "round_seconds": 3_600,
        "lease_ms": harness.LEASE_MS,
        "lapse_ms": harness.LAPSE_MS,
        "reap_interval_ms": harness.REAP_MS,
        "admin_token": "chaos-admin-token",
        "guess_rate": 0,  # the harness submits in bulk; chaos is about scoring, not throttling
    }
    return Config(**{**base, **changes})  # type: ignore[arg-type]


def worker_env(config: Config, **extra: str) -> dict[str, str]:
    """The ``CODEMOJEX_*`` environment a worker process reads ``config`` from."""
    env = {
        "CODEMOJEX_VALKEY_URL": str(config.valkey_url),
        "CODEMOJEX_DATABASE_URL": str(config.database_url),
        "CODEMOJEX_DATA_DIR": str(config.data_dir),
        "CODEMOJEX_ROUND_SECONDS": str(config.round_seconds),
        "CODEMOJEX_ADMIN_TOKEN": str(config.admin_token),
        **harness.timings_env(config.lease_ms, config.lapse_ms, config.reap_interval_ms),
    }
    return {**env, **extra}


@pytest.fixture
def config(valkey: EmbeddedValkey, sql_url: str, tmp_path: Path) -> Config:
    return make_config(valkey.url, sql_url, tmp_path)


@pytest.fixture
async def game(config: Config) -> AsyncIterator[Game]:
    g = Game.connect(config)
    try:
        yield g
    finally:
        await g.close()


@pytest.fixture(scope="session")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Zygote]:
    z = harness.Zygote(tmp_path_factory.mktemp("zygote") / "zygote.log")
    try:
        yield z
    finally:
        z.close()


@pytest.fixture
async def pools(zygote: harness.Zygote, tmp_path: Path) -> AsyncIterator[list[harness.Pool]]:
    """Pools a test creates are appended here and stopped at teardown, whatever happened."""
    made: list[harness.Pool] = []
    try:
        yield made
    finally:
        for pool in made:
            await pool.stop_all(timeout=5)


@pytest.fixture
def figures(capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> harness.Figures:
    return harness.Figures(capsys, request.node.nodeid)
