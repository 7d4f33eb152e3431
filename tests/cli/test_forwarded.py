"""Behind a proxy: ``--forwarded-allow-ips`` (``CODEMOJEX_FORWARDED_ALLOW_IPS``) makes the
real ``codemojex web`` process read a player's address from X-Forwarded-For, so the
new-player bucket (one per client address) is per player, not one for everyone behind the
proxy. Without it the header is ignored: a client cannot pick an address and escape its
bucket, even with uvicorn's own ``FORWARDED_ALLOW_IPS`` in the environment.

Each test runs its own Valkey, so the buckets it spends are its own; the new-player burst
is 2 and refills once in 100 s, so no token comes back during a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from harness.running import ROOT, Up, WebProcess, cmdline, web_processes

pytestmark = pytest.mark.slow

BURST = 2
LIMITS = {"CODEMOJEX_PLAYER_BURST": str(BURST), "CODEMOJEX_PLAYER_RATE": "0.01"}


class Web(WebProcess):
    """One ``python -m codemojex web`` on a free port."""

    def new_player(self, forwarded_for: str | None = None) -> int:
        """The status of ``POST /api/players``, over a fresh connection, as a proxy opens."""
        headers = {} if forwarded_for is None else {"X-Forwarded-For": forwarded_for}
        r = httpx.post(
            f"{self.base}/api/players",
            json={"name": "fwd"},
            headers=headers,
            trust_env=False,
            timeout=10,
        )
        assert r.status_code in (201, 429), r.text
        return r.status_code


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Callable[..., Web]]:
    """``start_web(*flags, env={...})`` -> a ready ``codemojex web`` with the test's bucket
    limits (:func:`harness.running.web_processes`)."""
    with web_processes(tmp_path, Web, LIMITS) as start:
        yield start


def test_a_trusted_proxy_gives_each_forwarded_address_its_own_new_player_bucket(
    start_web: Callable[..., Web],
) -> None:
    web = start_web("--forwarded-allow-ips", "127.0.0.1")  # we are the proxy
    alice, bob = "203.0.113.7", "198.51.100.23"
    assert [web.new_player(alice) for _ in range(BURST + 1)] == [201] * BURST + [429]
    # Another player behind the same proxy still gets in: the buckets are per player.
    assert web.new_player(bob) == 201
    # nginx appends the address it saw to whatever the client sent: the client's own
    # entries are to its left and do not count, so alice cannot write her way out.
    assert web.new_player(f"192.0.2.1, {alice}") == 429
    # The proxy's own requests (no header) are its address, a bucket of their own.
    assert web.new_player() == 201


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        # The default: no proxy is trusted, whatever uvicorn's own variable says.
        ([], {"FORWARDED_ALLOW_IPS": "*"}),
        # A proxy is trusted, but this client (127.0.0.1) is not it.
        ([], {"CODEMOJEX_FORWARDED_ALLOW_IPS": "192.0.2.0/24"}),
    ],
    ids=["no-proxy-trusted", "another-proxy-trusted"],
)
def test_an_untrusted_client_cannot_pick_its_address_with_x_forwarded_for(
    start_web: Callable[..., Web], flags: list[str], env: dict[str, str]
) -> None:
    web = start_web(*flags, env=env)
    assert [web.new_player() for _ in range(BURST + 1)] == [201] * BURST + [429]
    # A made-up header for each attempt: still the TCP peer's bucket, still empty.
    for n in range(1, 4):
        assert web.new_player(f"203.0.113.{n}") == 429
        assert web.new_player(f"198.51.100.{n}, 203.0.113.{n}") == 429


def test_a_bad_forwarded_allow_ips_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "codemojex", "web", "--valkey-url", "redis://127.0.0.1:9"]
        + ["--forwarded-allow-ips", "10.0.0.1,proxy"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, done.stderr
    assert "--forwarded-allow-ips" in line and "'proxy'" in line, line


def test_up_hands_the_setting_to_every_web_process(start_up: Callable[..., Up]) -> None:
    """``up`` passes its resolved configuration to its children as CODEMOJEX_* variables
    (``child_env``); each web process reads them as ``codemojex web`` does above."""
    up = start_up("--workers", "0", "--web-processes", "2", "--forwarded-allow-ips", "10.9.0.0/16")
    pids = up.web_pids()
    assert len(pids) == 2, {p: cmdline(p) for p in up.track()}
    for pid in pids:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"CODEMOJEX_FORWARDED_ALLOW_IPS=10.9.0.0/16" in environ, cmdline(pid)
