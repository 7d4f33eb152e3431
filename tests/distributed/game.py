"""``codemojex web`` and ``codemojex worker`` as real processes against one Valkey URL (a
cluster's, here) and one SQLite file, plus a small HTTP player, for the distributed tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from harness.helpers import free_port
from harness.running import ROOT, wait_until


class Game:
    """The processes of one game; every one is killed at ``close()`` whatever happened."""

    def __init__(
        self, root: Path, valkey_url: str, *extra: str, database_url: str | None = None
    ) -> None:
        self.root = root
        self.valkey_url = valkey_url
        self.db = root / "game.db"
        self.database_url = database_url  # None: SQLite in root
        self.extra = list(extra)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
        self.env.update(CODEMOJEX_ADMIN_TOKEN="a" * 32)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.webs: list[tuple[subprocess.Popen[bytes], int]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        subprocess.run(
            [sys.executable, "-m", "codemojex", "migrate", "--database-url", self.sql_url],
            check=True,
            cwd=ROOT,
            env=self.env,
            capture_output=True,
        )

    @property
    def sql_url(self) -> str:
        return self.database_url or f"sqlite:///{self.db}"

    def _spawn(self, role: str, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codemojex",
                role,
                "--valkey-url",
                self.valkey_url,
                "--database-url",
                self.sql_url,
                "--data-dir",
                str(self.root),
                *self.extra,
                *args,
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def web(self, *args: str, wait: bool = True) -> str:
        """Start a web process; its base URL once it answers /healthz (``wait=False``: at
        once, for starting several side by side; then call :meth:`wait_webs`)."""
        port = free_port()
        proc = self._spawn("web", f"web{len(self.webs)}", "--port", str(port), *args)
        self.webs.append((proc, port))
        if wait:
            self.wait_webs()
        return f"http://127.0.0.1:{port}"

    def wait_webs(self) -> None:
        for i, (proc, port) in enumerate(self.webs):

            def healthy(
                proc: subprocess.Popen[bytes] = proc, port: int = port, name: str = f"web{i}"
            ) -> bool:
                assert proc.poll() is None, self.log(name)
                with contextlib.suppress(httpx.HTTPError):
                    url = f"http://127.0.0.1:{port}/healthz"
                    return httpx.get(url, timeout=2, trust_env=False).status_code == 200
                return False

            wait_until(healthy, 30, f"web{i} healthy")

    def worker(self, *args: str) -> subprocess.Popen[bytes]:
        proc = self._spawn("worker", f"worker{len(self.workers)}", *args)
        self.workers.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def scores(self) -> dict[str, int]:
        """job_id -> how many score rows SQL holds for it."""
        query = "SELECT job_id, count(*) FROM scores GROUP BY job_id"
        if self.database_url:
            rows = asyncio.run(_pg_rows(self.database_url, query))
        else:
            with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as db:
                rows = db.execute(query).fetchall()
        return {str(job): int(n) for job, n in rows}

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


async def _pg_rows(url: str, query: str) -> list[Any]:
    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        return list(await conn.fetch(query))
    finally:
        await conn.close()


@contextlib.contextmanager
def running(
    root: Path, valkey_url: str, *extra: str, database_url: str | None = None
) -> Iterator[Game]:
    game = Game(root, valkey_url, *extra, database_url=database_url)
    try:
        yield game
    finally:
        game.close()


class Player:
    """One player over HTTP."""

    def __init__(self, http: httpx.Client, name: str) -> None:
        r = http.post("/api/players", json={"name": name})
        assert r.status_code == 201, r.text
        body = r.json()
        self.http = http
        self.player_id: str = body["player_id"]
        self.token: str = body["token"]
        self.headers = {"Authorization": f"Bearer {body['token']}"}

    def guess(self, round_: dict[str, Any], n: int) -> httpx.Response:
        palette = round_["palette"]
        code = [palette[(n + i) % len(palette)] for i in range(round_["length"])]
        return self.http.post(
            "/api/guesses",
            headers=self.headers,
            json={"round_id": round_["round_id"], "guess": code},
        )
