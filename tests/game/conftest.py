"""A private Valkey per module (the game's key names are fixed) and a fresh SQLite per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from codemojex import store
from codemojex.config import Config
from codemojex.game import Game
from echomq.server import EmbeddedValkey


@pytest.fixture(scope="module")
def private_valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey(tmp_path_factory.mktemp("valkey"), appendfsync="everysec") as server:
        yield server


@pytest.fixture
async def config(private_valkey: EmbeddedValkey, tmp_path: Path) -> Config:
    cfg = Config(
        valkey_url=private_valkey.url,
        data_dir=tmp_path,
        round_seconds=60,
        lease_ms=2_000,
        lapse_ms=500,
        reap_interval_ms=200,
    )
    await store.migrate_async(cfg.sql_url)
    return cfg


@pytest.fixture
async def game(config: Config) -> AsyncIterator[Game]:
    g = Game.connect(config)
    await g.conn.flushall()  # a private server: nothing else lives here
    try:
        yield g
    finally:
        await g.close()
