"""Fixtures of the web tests: the real app under a real uvicorn, on a private Valkey.

The game's keys have fixed names (``emq:{guesses}:…``, ``cmx:{rounds}:…``), so the web
tests never share the session server: each module gets a private ``EmbeddedValkey`` and
a migrated SQLite file, and each test makes fresh players. Web servers run in-process,
one per test, and are always stopped.

ScoreWorkers run as processes of their own (``codemojex.worker.run_worker`` under
``python -c``), stopped with SIGTERM as in production. Not in-process: cancelling an
in-process worker mid-score can leave its SQLite write transaction open, which then locks
the database for every later test; a process that ends releases its locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio
from websockets.asyncio.client import ClientConnection

import echomq
import echomq.ids
from codemojex.config import GUESS_QUEUE, Config
from codemojex.store import migrate, sqlite_url
from echomq.keys import Keys
from echomq.partitions import partition_names
from echomq.server import EmbeddedValkey, die_with_parent
from harness.helpers import free_port
from web.app import create_app
from web.server import Server, server_config

ADMIN_TOKEN = "test-admin-token-0123456789"
SERVER_START_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def private_valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    # appendfsync "no": these tests are about the edge, not about durability.
    with EmbeddedValkey(tmp_path_factory.mktemp("web-valkey"), appendfsync="no") as server:
        yield server


@pytest.fixture(scope="module")
def sql_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = sqlite_url(tmp_path_factory.mktemp("web-sql"))
    migrate(url)
    return url


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    """Config overrides for a whole module (its app and its worker); modules override it."""
    return {}


@pytest.fixture
def config(
    private_valkey: EmbeddedValkey, sql_url: str, tmp_path: Path, game_settings: dict[str, Any]
) -> Config:
    return make_config(private_valkey.url, sql_url, tmp_path, **game_settings)


@pytest.fixture
def configure(private_valkey: EmbeddedValkey, sql_url: str, tmp_path: Path) -> Any:
    """``configure(**changes)`` -> a :class:`Config` on the module's private Valkey and
    SQLite file, for a test that sets its own limits."""

    def make(**changes: Any) -> Config:
        return make_config(private_valkey.url, sql_url, tmp_path, **changes)

    return make


def make_config(valkey_url: str, database_url: str, data_dir: Path, **changes: Any) -> Config:
    return Config(
        valkey_url=valkey_url,
        database_url=database_url,
        data_dir=data_dir,
        admin_token=ADMIN_TOKEN,
        **changes,
    )


@dataclass
class Served:
    """One running web server and an HTTP client pointed at it."""

    config: Config
    port: int
    http: httpx.AsyncClient
    app: Any

    @property
    def hub(self) -> Any:
        """The app's hub (tests reach in to provoke what a real socket rarely does)."""
        return self.app.state.services.hub

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws_url(self, token: str, after: str | None = None) -> str:
        url = f"ws://127.0.0.1:{self.port}/ws?token={token}"
        return url if after is None else f"{url}&after={after}"

    async def new_player(self, name: str = "Ada") -> dict[str, Any]:
        resp = await self.http.post("/api/players", json={"name": name})
        assert resp.status_code == 201, resp.text
        return dict(resp.json())

    async def current_round(self) -> dict[str, Any]:
        resp = await self.http.get("/api/round")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())


@contextlib.asynccontextmanager
async def serve(config: Config) -> AsyncIterator[Served]:
    """The app under a real uvicorn on a free port, until the block ends."""
    port = free_port()
    app = create_app(config)
    server = Server(server_config(app, port=port, log_level="warning", graceful_shutdown_s=2))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(SERVER_START_TIMEOUT_S):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped before it started serving")
                await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            yield Served(config, port, http, app)
    finally:
        server.should_exit = True
        await task


_WORKER_MAIN = (
    "import asyncio, sys\n"
    "from codemojex.config import Config\n"
    "from codemojex.worker import run_worker\n"
    "asyncio.run(run_worker(Config.from_env(), sys.argv[1]))\n"
)


@dataclass
class WorkerProcess:
    worker_id: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_worker(config: Config, log: Path) -> WorkerProcess:
    """A ScoreWorker process for ``config``, returned once it heartbeats."""
    worker_id = echomq.ids.worker_id()
    env = {
        **os.environ,
        "CODEMOJEX_VALKEY_URL": str(config.valkey_url),
        "CODEMOJEX_DATABASE_URL": str(config.database_url),
        "CODEMOJEX_DATA_DIR": str(config.data_dir),
        "CODEMOJEX_ROUND_SECONDS": str(config.round_seconds),
        "CODEMOJEX_LANE_CAP": str(config.lane_cap),
        "CODEMOJEX_PARTITIONS": str(config.partitions),
    }
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_MAIN, worker_id],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # never outlive the test run; the child runs only prctl
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
    worker = WorkerProcess(worker_id, proc)
    import redis

    conn = redis.Redis.from_url(str(config.valkey_url))
    registry = Keys(partition_names(GUESS_QUEUE, config.partitions)[-1]).workers
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while conn.zscore(registry, worker_id) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                worker.stop()
                raise RuntimeError(f"worker did not start: {log.read_text()[-2000:]}")
            time.sleep(0.02)
    finally:
        conn.close()
    return worker


@pytest.fixture
async def served(config: Config) -> AsyncIterator[Served]:
    async with serve(config) as s:
        yield s


@pytest.fixture(scope="module")
def module_worker(
    private_valkey: EmbeddedValkey,
    sql_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    game_settings: dict[str, Any],
) -> Iterator[WorkerProcess]:
    """A ScoreWorker process for the whole module."""
    data = tmp_path_factory.mktemp("worker")
    w = start_worker(
        make_config(private_valkey.url, sql_url, data, **game_settings), data / "worker.log"
    )
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def worker(config: Config, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A ScoreWorker process for this test only."""
    w = start_worker(config, tmp_path / "worker.log")
    try:
        yield w
    finally:
        w.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The contract's error answer: that status, ``{"error": code, "detail": text}``."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert body["error"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return dict(body)


async def submit(s: Served, token: str, round_id: str, guess: list[str]) -> str:
    """``POST /api/guesses``, which must be accepted; the new guess's job id."""
    resp = await s.http.post(
        "/api/guesses", json={"round_id": round_id, "guess": guess}, headers=bearer(token)
    )
    assert resp.status_code == 202, resp.text
    return str(resp.json()["job_id"])


async def wait_completed(s: Served, token: str, job_id: str, timeout: float = 10.0) -> None:
    """Wait until the job's completion (and so its event) exists."""
    async with asyncio.timeout(timeout):
        while True:
            resp = await s.http.get(f"/api/guesses/{job_id}", headers=bearer(token))
            if resp.json()["state"] == "completed":
                return
            await asyncio.sleep(0.05)


async def wait_scored(s: Served, token: str, job_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """Poll ``GET /api/guesses/{job_id}`` until the guess has its score."""
    async with asyncio.timeout(timeout):
        while True:
            resp = await s.http.get(f"/api/guesses/{job_id}", headers=bearer(token))
            assert resp.status_code == 200, resp.text
            if resp.json()["score"] is not None:
                return dict(resp.json())
            await asyncio.sleep(0.05)


# -- websockets ------------------------------------------------------------------------------


async def recv(ws: ClientConnection, timeout: float = 5.0) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        raw = await ws.recv()
    assert isinstance(raw, str), raw
    return dict(orjson.loads(raw))


async def recv_until(
    ws: ClientConnection,
    want: Callable[[dict[str, Any]], bool],
    timeout: float = 10.0,
    seen: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The first message ``want`` accepts; every message read is appended to ``seen``."""
    async with asyncio.timeout(timeout):
        while True:
            msg = await recv(ws, timeout)
            if seen is not None:
                seen.append(msg)
            if want(msg):
                return msg


async def drain(ws: ClientConnection, seconds: float) -> list[str]:
    """Every raw frame received within ``seconds``."""
    frames: list[str] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while True:
                raw = await ws.recv()
                frames.append(raw if isinstance(raw, str) else raw.decode("latin-1"))
    return frames


def of_type(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == kind and all(m.get(k) == v for k, v in fields.items())


@pytest.fixture
async def valkey(private_valkey: EmbeddedValkey) -> AsyncIterator[redis.asyncio.Redis]:
    """A client of the module's Valkey, for tests that look at (or provoke) its state."""
    conn = redis.asyncio.Redis.from_url(private_valkey.url)
    try:
        yield conn
    finally:
        await conn.aclose()


async def secret_of(valkey: redis.asyncio.Redis, round_id: str) -> list[str]:
    """A round's secret, read where the game keeps it (tests only: to make a solve)."""
    raw = await valkey.hget(f"cmx:{{rounds}}:round:{round_id}", "secret")
    assert raw is not None
    return list(orjson.loads(raw))


@contextlib.contextmanager
def served_in_thread(config: Config, name: str) -> Iterator[int]:
    """The production server (``server_config``) for ``config`` on a free port, in a thread
    with its own event loop, for tests whose own loop only waits on a client; yields the
    port and stops the server after."""
    port = free_port()
    server = Server(
        server_config(create_app(config), port=port, log_level="warning", graceful_shutdown_s=2)
    )
    thread = threading.Thread(target=server.run, name=name)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        thread.join(15)
