"""A throwaway PostgreSQL cluster for tests, started from the machine's binaries.

``initdb``/``pg_ctl`` refuse to run as root, so as root they run as the ``postgres`` user
(``runuser -u postgres``) on a temp dir chowned to it. The cluster listens on 127.0.0.1 on
a free port with its socket in that temp dir, trusts local connections, and runs with
``fsync=off`` — it is thrown away at the end, so durability would only cost time.

    cluster = PgCluster.start()      # raises PgUnavailable if the binaries are missing
    url = cluster.create_database()  # postgresql+asyncpg://postgres@127.0.0.1:PORT/t_<uuid>
    cluster.stop()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

INSTALL_HINT = "PostgreSQL not installed: apt-get install -y postgresql"
_SUPERUSER = "postgres"


class PgUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not on this machine."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, if any."""
    candidates = [shutil.which("initdb")]
    # Debian keeps them off PATH, one directory per major version; newest first.
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    for initdb in candidates:
        if initdb:
            bindir = Path(initdb).resolve().parent
            if all((bindir / tool).exists() for tool in ("pg_ctl", "postgres")):
                return bindir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    bindir: Path
    root: Path  # temp dir: data/, the socket and the log
    port: int
    as_postgres: bool  # running as root: every server command goes through runuser

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def server_url(self) -> str:
        """URL of the maintenance database ``postgres`` (asyncpg driver)."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql+asyncpg://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls) -> PgCluster:
        bindir = find_bindir()
        if bindir is None:
            raise PgUnavailable(INSTALL_HINT)
        as_postgres = os.geteuid() == 0
        root = Path(tempfile.mkdtemp(prefix="codemojex-pg-"))
        if as_postgres:
            shutil.chown(root, user=_SUPERUSER, group=_SUPERUSER)
        cluster = cls(bindir=bindir, root=root, port=_free_port(), as_postgres=as_postgres)
        try:
            cluster._initdb()
            cluster._pg_ctl_start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", _SUPERUSER, "--", *cmd]
        proc = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "LC_ALL": "C"},
        )
        if proc.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}{tail}"
            )

    def _initdb(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.datadir),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )

    def _pg_ctl_start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
            ]
        )
        self._run(
            "pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server at once (nothing in it is worth a clean shutdown) and delete it."""
        if (self.datadir / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """Create a fresh, empty database and return its URL (asyncpg driver).

        Safe to call from sync code, even while an event loop is running in this thread:
        the asyncpg work runs on a loop of its own in a helper thread.
        """
        name = f"t_{uuid.uuid4().hex}"
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, self._create(name)).result(timeout=60)
        return self.url_for(name)

    async def _create(self, name: str) -> None:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=self.port, user=_SUPERUSER, database="postgres"
        )
        try:
            # FILE_COPY: copying template1's files beats WAL-logging them block by block.
            await conn.execute(f'CREATE DATABASE "{name}" STRATEGY = FILE_COPY')
        finally:
            await conn.close()
