"""Valkey with a password, as compose runs it: the web server takes it in its Valkey URL
(``redis://:PASSWORD@host:port/0``, CODEMOJEX_VALKEY_URL) and plays; without it, or with
another, Valkey refuses the client, and compose's health check says so."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import yaml  # type: ignore[import-untyped, unused-ignore]

from codemojex.config import Config
from echomq import connection
from echomq.server import EmbeddedValkey, find_valkey_server
from harness.running import ROOT, WebProcess, web_processes

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


def test_compose_valkey_health_check_passes_with_the_password_only(
    locked: EmbeddedValkey,
) -> None:
    """compose's own health check command, run as its shell would run it (valkey-cli of
    the same 8.1 line, pointed at this server's port), with REDISCLI_AUTH as compose sets
    it: healthy with the password, unhealthy without or with another."""
    cli = Path(find_valkey_server()).with_name("valkey-cli")
    if not cli.exists():
        pytest.skip(f"no valkey-cli beside {cli.parent / 'valkey-server'}")
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    kind, command = compose["services"]["valkey"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and command.startswith("valkey-cli ")
    command = command.replace("valkey-cli", f"{cli} -p {locked.port}", 1)

    def healthy(password: str | None) -> bool:
        env = {"PATH": os.environ["PATH"]}
        if password is not None:
            env["REDISCLI_AUTH"] = password
        done = subprocess.run(
            ["sh", "-c", command], check=False, env=env, capture_output=True, timeout=10
        )
        return done.returncode == 0

    assert healthy(locked.requirepass)
    assert not healthy(None) and not healthy("wrong")
