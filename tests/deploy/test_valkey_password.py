"""Valkey with a password, as compose runs it: the web server takes it in its Valkey URL
(``redis://:PASSWORD@host:port/0``, CODEMOJEX_VALKEY_URL) and plays; without it, or with
another, Valkey refuses the client."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from codemojex.config import Config
from echomq import connection
from echomq.server import EmbeddedValkey
from tests.cli.running import WebProcess, web_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path / "locked", requirepass=secrets.token_hex(24))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_web_server_plays_on_a_valkey_that_wants_a_password(
    tmp_path: Path, locked: EmbeddedValkey
) -> None:
    assert locked.requirepass is not None
    url = f"redis://:{locked.requirepass}@127.0.0.1:{locked.port}/0"
    assert Config.from_env({"CODEMOJEX_VALKEY_URL": url}).valkey_url == url
    for wrong in (f"redis://127.0.0.1:{locked.port}/0", f"redis://:nope@127.0.0.1:{locked.port}/0"):
        client = connection.connect_sync(wrong)
        with pytest.raises(redis.AuthenticationError):
            client.ping()
        client.close()
    with web_processes(tmp_path / "web", WebProcess) as start:
        web = start("--valkey-url", url)  # the last --valkey-url wins over the starter's own
        created = httpx.post(
            f"{web.base}/api/players", json={"name": "Pw"}, trust_env=False, timeout=10
        )
        assert created.status_code == 201, created.text
        assert httpx.get(f"{web.base}/api/round", trust_env=False, timeout=10).status_code == 200
    client = connection.connect_sync(url)
    assert client.ping() and client.dbsize() > 0  # the game's keys are on the locked server
    client.close()
