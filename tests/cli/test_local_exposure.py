"""What another user of the same machine can reach of ``codemojex up``: nothing. The
embedded Valkey wants a password (kept in the private data dir), and every file up makes
is its owner's alone."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from harness.running import Up

pytestmark = pytest.mark.slow


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_embedded_valkey_wants_a_password_and_the_files_are_private(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "1")
    assert ":***@" in up.out_path.read_text()  # the banner shows no password
    url = up.valkey_url
    password = (up.data_dir / "valkey_password").read_text().strip()
    assert password and password in url
    anonymous = redis.Redis.from_url(url.replace(f":{password}@", ""), socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        anonymous.get("cmx:{rounds}:current")  # the open round's secret is one key away
    anonymous.close()
    with redis.Redis.from_url(url, socket_timeout=5) as owner:
        assert owner.ping()
    assert up.stop() == 0, up.logs()
    assert _mode(up.data_dir) == 0o700
    files = [p for p in up.data_dir.rglob("*") if p.is_file()]
    for name in ("codemojex.db", "admin_token", "valkey_password", "valkey/valkey.conf"):
        assert (up.data_dir / name) in files, name
    assert any(p.parent.name == "appendonly" for p in files)
    loose = {str(p.relative_to(up.data_dir)): oct(_mode(p)) for p in files if _mode(p) & 0o077}
    assert not loose, loose
