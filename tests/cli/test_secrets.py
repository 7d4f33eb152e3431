"""Secrets and exposure of the single roles, as real processes (``codemojex web``,
``worker``, ``migrate``) on a real Valkey:

* at ``--log-level debug`` (uvicorn's and websockets' handshake dumps, the access log), in
  both log formats, no player, admin or metrics token reaches any line, whichever way it
  travelled: the token subprotocol, ``?token=`` in any percent-encoding or case, an
  ``Authorization`` header of any scheme, on a socket or a plain request;
* with ``CODEMOJEX_METRICS_TOKEN`` set, the web's ``/metrics`` and a worker's
  ``--metrics-port`` answer ``401 unauthorized`` without ``Bearer <that token>``, and the
  token is on no process's command line;
* ``web``, ``worker`` and ``migrate`` alone make their data dir 0700 and their files 0600
  (the SQLite file holds the open round's secret), as ``up`` does, whatever the umask.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import websockets
from websockets.typing import Subprotocol

from codemojex.store import migrate
from echomq.server import EmbeddedValkey
from harness.helpers import free_port
from harness.running import ROOT, cmdline, wait_until

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "adm1n-S3cret-0f-the-0perat0r-xyz"
METRICS_TOKEN = "metr1cs-S3cret-0f-prometheus-xyz"


class Role:
    """One ``python -m codemojex <role> …`` with its output in a file."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, port: int | None) -> None:
        self.proc = proc
        self.log = log
        self.base = f"http://127.0.0.1:{port}" if port else ""

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> bool:
        """SIGTERM; whether it stopped cleanly (uvicorn re-raises the signal once it has
        shut down, so a web process ends -SIGTERM)."""
        self.proc.terminate()
        try:
            return self.proc.wait(20) in (0, -signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"did not stop on SIGTERM\n{self.logs()[-4000:]}") from None


@pytest.fixture(scope="module")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey(tmp_path_factory.mktemp("valkey")) as server:
        yield server


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Role]]:
    """``start("web", *flags, env={...})`` -> a running role (no ``CODEMOJEX_*`` of ours
    leaks in, umask 022 as on a stock system); stopped at teardown."""
    started: list[Role] = []

    def run(role: str, *flags: str, env: dict[str, str] | None = None) -> Role:
        port = free_port() if role == "web" else None
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
        log = tmp_path / f"{role}-{len(started)}.log"
        argv = [sys.executable, "-m", "codemojex", role, *flags]
        if port:
            argv += ["--port", str(port)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**clean, **(env or {})},
                cwd=ROOT,
                umask=0o022,
            )
        started.append(Role(proc, log, port))
        return started[-1]

    try:
        yield run
    finally:
        for role in started:
            if role.proc.poll() is None:
                role.proc.kill()
                role.proc.wait(10)


def _healthy(role: Role) -> bool:
    if role.proc.poll() is not None:
        raise AssertionError(f"exited {role.proc.returncode}\n{role.logs()[-4000:]}")
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{role.base}/healthz", trust_env=False, timeout=2).status_code == 200
    return False


def _offer(token_protocol: str) -> list[Subprotocol]:
    return [Subprotocol("codemojex"), Subprotocol(token_protocol)]


def _database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'codemojex.db'}"
    migrate(url)
    return url


# -- no token in any log line ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_token_reaches_any_log_line_at_debug_level(
    start: Callable[..., Role], valkey: EmbeddedValkey, tmp_path: Path, fmt: str
) -> None:
    env = {
        "CODEMOJEX_ADMIN_TOKEN": ADMIN_TOKEN,
        "CODEMOJEX_METRICS_TOKEN": METRICS_TOKEN,
        "CODEMOJEX_LOG_FORMAT": fmt,
    }
    web = start(
        "web",
        *("--valkey-url", valkey.url, "--database-url", _database(tmp_path)),
        *("--data-dir", str(tmp_path / "data"), "--log-level", "debug", "--access-log"),
        env=env,
    )
    wait_until(lambda: _healthy(web), 30, "web to answer /healthz", logs=web.logs)
    http = httpx.Client(base_url=web.base, trust_env=False, timeout=5)
    token = http.post("/api/players", json={"name": "logged"}).json()["token"]
    ws = f"ws://127.0.0.1:{web.base.rsplit(':', 1)[1]}/ws"

    async def sockets() -> None:
        accepted = [
            websockets.connect(ws, subprotocols=_offer(f"codemojex.token.{token}")),
            websockets.connect(f"{ws}?token={token}"),
            websockets.connect(f"{ws}?%74oken={token}&after=0-0"),
            websockets.connect(f"{ws}?t%6F%6Ben={token}"),
        ]
        for connecting in accepted:
            async with connecting as sock:
                assert orjson.loads(await asyncio.wait_for(sock.recv(), 10))["type"] == "round"
        refused = [  # 403 before the upgrade; each is still logged, handshake and all
            websockets.connect(f"{ws}?TOKEN={token}"),
            websockets.connect(ws, additional_headers={"Authorization": f"Bearer {token}"}),
            websockets.connect(ws, subprotocols=_offer(f"codemojex.token.{token}x")),
            websockets.connect(f"{ws}?token={token}x"),
        ]
        for connecting in refused:
            with pytest.raises(websockets.InvalidStatus):
                async with connecting:
                    pass

    asyncio.run(sockets())
    round_id = http.get("/api/round").json()["round_id"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert http.post("/api/guesses", json={"round_id": round_id, "guess": ["x"]}, headers=bearer)
    assert http.get(f"/api/guesses?round_id={round_id}", headers=bearer).status_code == 200
    http.get(f"/api/guesses?round_id={round_id}&%74oken={token}")  # a token where none goes
    http.get("/api/round", headers={"Authorization": token})  # no scheme at all
    admin = http.get("/api/admin/queue", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert admin.status_code == 200
    scrape = http.get("/metrics", headers={"Authorization": f"bearer {METRICS_TOKEN}"})
    assert scrape.status_code == 200
    http.get(f"/metrics?token={METRICS_TOKEN}")
    http.close()
    assert web.stop(), web.logs()[-4000:]

    logs = web.logs()
    for secret in (token, ADMIN_TOKEN, METRICS_TOKEN):
        leaks = [line for line in logs.splitlines() if secret[:12] in line]
        assert not leaks, leaks
    # The lines that carried the tokens are there, redacted: debug logging did run.
    assert "codemojex.token.…" in logs, "no handshake dump: was --log-level debug in force?"
    assert "%74oken=…" in logs and "TOKEN=…" in logs
    assert "GET /metrics" in logs  # the access log
    if fmt == "json":
        assert all(orjson.loads(line) for line in logs.splitlines())


# -- /metrics behind CODEMOJEX_METRICS_TOKEN ---------------------------------------------------


def _answers(url: str, **headers: str) -> tuple[int, str]:
    r = httpx.get(url, headers=headers, trust_env=False, timeout=5)
    return r.status_code, r.text


def _guarded(url: str) -> None:
    """``url`` serves metrics only to ``Bearer METRICS_TOKEN``."""
    for headers in (
        {},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {METRICS_TOKEN}x"},
        {"Authorization": f"Bearer {METRICS_TOKEN[:-1]}"},
        {"Authorization": f"Basic {METRICS_TOKEN}"},
        {"Authorization": f"Bearer {ADMIN_TOKEN}"},  # the admin's token is not this one
    ):
        status, body = _answers(url, **headers)
        assert status == 401, (headers, status, body)
        error = orjson.loads(body)
        assert error["error"] == "unauthorized" and error["detail"], error
        assert "codemojex_" not in body
    status, body = _answers(url, Authorization=f"Bearer {METRICS_TOKEN}")
    assert status == 200 and "process_cpu_seconds_total" in body, body[:500]


def test_metrics_want_the_metrics_token_where_it_is_set(
    start: Callable[..., Role], valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    database = _database(tmp_path)
    env = {"CODEMOJEX_ADMIN_TOKEN": ADMIN_TOKEN, "CODEMOJEX_METRICS_TOKEN": METRICS_TOKEN}
    common = ("--valkey-url", valkey.url, "--database-url", database)
    web = start("web", *common, env=env)
    metrics_port = free_port()
    worker = start("worker", *common, "--metrics-port", str(metrics_port), env=env)
    wait_until(lambda: _healthy(web), 30, "web to answer /healthz", logs=web.logs)
    worker_url = f"http://127.0.0.1:{metrics_port}/metrics"

    def worker_serving() -> bool:
        assert worker.proc.poll() is None, worker.logs()
        with contextlib.suppress(httpx.HTTPError):
            return _answers(worker_url)[0] == 401
        return False

    wait_until(worker_serving, 30, "the worker's /metrics", logs=worker.logs)
    _guarded(f"{web.base}/metrics")
    _guarded(worker_url)
    status, body = _answers(f"{web.base}/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
    # Once authorized, the scrape reads the queue as before.
    assert status == 200 and "codemojex_queue_up 1.0" in body
    # The rest of the web is as public as ever, and the token is in no `ps` line.
    assert _answers(f"{web.base}/api/round")[0] == 200
    for role in (web, worker):
        assert METRICS_TOKEN not in cmdline(role.proc.pid)
    assert web.stop() and worker.stop()


# -- private data dirs -------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _private(data_dir: Path, *names: str) -> None:
    """``data_dir`` is 0700, holds ``names``, and every file in it is 0600 or less."""
    assert _mode(data_dir) == 0o700, oct(_mode(data_dir))
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    for name in names:
        assert data_dir / name in files, (name, files)
    loose = {str(p.relative_to(data_dir)): oct(_mode(p)) for p in files if _mode(p) & 0o077}
    assert not loose, loose


def test_web_worker_and_migrate_alone_keep_their_data_dir_private(
    start: Callable[..., Role], valkey: EmbeddedValkey, tmp_path: Path
) -> None:
    """Each on a data dir of its own with the default SQLite in it, under umask 022: the
    dir comes out 0700 (a fresh one, or one the operator made 0755), the files 0600."""
    migrated = tmp_path / "migrated"
    done = start("migrate", "--data-dir", str(migrated))
    assert done.proc.wait(60) == 0, done.logs()
    _private(migrated, "codemojex.db")

    # web on a fresh dir: it makes the admin token, and the SQLite file on its first
    # health check (unmigrated, so /healthz says 503: the file is what counts here).
    fresh = tmp_path / "web-data"
    web = start("web", "--valkey-url", valkey.url, "--data-dir", str(fresh))

    def web_made_its_files() -> bool:
        assert web.proc.poll() is None, web.logs()
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{web.base}/healthz", trust_env=False, timeout=2)
        return (fresh / "codemojex.db").exists() and (fresh / "admin_token").exists()

    wait_until(web_made_its_files, 30, "web's SQLite file and admin token", logs=web.logs)
    # Unset, the metrics token guards nothing: /metrics is public, as it always was.
    assert _answers(f"{web.base}/metrics")[0] == 200
    assert web.stop(), web.logs()
    _private(fresh, "codemojex.db", "admin_token")

    # worker on a dir the operator made with the stock umask.
    made = tmp_path / "worker-data"
    made.mkdir(mode=0o755)
    os.chmod(made, 0o755)
    worker = start("worker", "--valkey-url", valkey.url, "--data-dir", str(made))
    wait_until(
        lambda: (made / "codemojex.db").exists() or worker.proc.poll() is not None,
        30,
        "the worker's SQLite file",
        logs=worker.logs,
    )
    time.sleep(0.5)  # its journal files, if it makes them, come right after
    assert worker.proc.poll() is None, worker.logs()
    assert worker.stop(), worker.logs()
    _private(made, "codemojex.db")
