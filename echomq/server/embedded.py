"""``EmbeddedValkey``: a real ``valkey-server`` in the foreground as our child process."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self, get_args

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.errors import ServerError

from .allocator import Allocator, malloc_in_use, preload_for
from .binary import find_valkey_server
from .config import (
    MAXMEMORY_SHARE,
    Appendfsync,
    default_maxmemory,
    durable_config,
    quote,
    write_config,
)
from .process import die_with_parent, live_servers

_APPENDFSYNC_VALUES: tuple[str, ...] = get_args(Appendfsync)
_ALLOCATOR_VALUES: tuple[str, ...] = get_args(Allocator)
_START_ATTEMPTS = 3
_SUN_PATH_MAX = 107  # Linux sockaddr_un.sun_path is 108 bytes including the NUL
_LOG_TAIL_LINES = 25
_POLL_INTERVAL = 0.02


class _AddressInUse(ServerError):
    """The port was taken between picking it and valkey binding it."""


def _pick_free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedValkey:
    """A real ``valkey-server`` in the foreground as our child, AOF on, eviction off.

    ``port=None`` (or 0) picks a free loopback port once, at construction, so ``url`` is known
    before ``start()`` and ``restart()`` comes back on the same address. ``unix_socket=True``
    listens only on ``data_dir/valkey.sock``. ``extra_config`` lines are merged last and
    written verbatim (``{"save": "900 1"}``); an empty value is written as ``""``.
    ``maxmemory``: bytes (0 = no limit); by default ``maxmemory_share`` of the machine's
    memory, capped at ``MAXMEMORY_CAP`` (see :func:`default_maxmemory`). ``requirepass``:
    clients must authenticate with it (it is part of ``url``), so another local user who
    can reach the loopback port still cannot read or write. ``allocator``: see
    ``echomq.server.allocator``; after ``start()``, ``malloc`` names the one in use.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        unix_socket: bool = False,
        appendfsync: Appendfsync = "always",
        binary: str | None = None,
        extra_config: Mapping[str, str] | None = None,
        maxmemory: int | None = None,
        maxmemory_share: float = MAXMEMORY_SHARE,
        requirepass: str | None = None,
        allocator: Allocator = "auto",
    ) -> None:
        if appendfsync not in _APPENDFSYNC_VALUES:
            raise ValueError(
                f"appendfsync must be one of {_APPENDFSYNC_VALUES}, not {appendfsync!r}"
            )
        if allocator not in _ALLOCATOR_VALUES:
            raise ValueError(f"allocator must be one of {_ALLOCATOR_VALUES}, not {allocator!r}")
        self.allocator: Allocator = allocator
        self.malloc: str | None = None  # "jemalloc", "libc": known once started
        if not 0 < maxmemory_share <= 1:
            raise ValueError(f"maxmemory_share must be in (0, 1], not {maxmemory_share!r}")
        if maxmemory is not None and (
            isinstance(maxmemory, bool) or not isinstance(maxmemory, int) or maxmemory < 0
        ):
            raise ValueError(f"maxmemory must be an int >= 0 (bytes), not {maxmemory!r}")
        self.maxmemory = default_maxmemory(maxmemory_share) if maxmemory is None else maxmemory
        if requirepass is not None and not re.fullmatch(r"[A-Za-z0-9_-]{16,256}", requirepass):
            raise ValueError("requirepass must be 16-256 URL-safe characters")
        self.requirepass = requirepass
        if unix_socket and port:
            raise ValueError("unix_socket=True listens on no TCP port; leave port unset")
        # Absolute: valkey chdirs into `dir`, and the url must not depend on our cwd.
        self.data_dir: Path = Path(data_dir).absolute()
        self.host = host
        self.unix_socket = unix_socket
        self.appendfsync: Appendfsync = appendfsync
        self.binary = binary
        self.extra_config: dict[str, str] = dict(extra_config or {})
        self.socket_path: Path | None = self.data_dir / "valkey.sock" if unix_socket else None
        self.config_path = self.data_dir / "valkey.conf"
        self.log_path = self.data_dir / "valkey.log"
        # Only a port we picked may be re-picked, and only before the first success: after
        # that, restart() must come back on the same address.
        self._may_repick_port = not unix_socket and not port
        self.port: int | None = None if unix_socket else (port or _pick_free_port(host))
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://[:PASSWORD@]127.0.0.1:PORT/0`` or ``unix:///…/valkey.sock``."""
        auth = f":{self.requirepass}@" if self.requirepass else ""
        if self.socket_path is not None:
            query = f"?password={self.requirepass}" if self.requirepass else ""
            return f"unix://{self.socket_path}{query}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"redis://{auth}{host}:{self.port}/0"

    def _sync_client(self) -> redis.Redis:
        # No retries: the readiness loop polls, and redis-py's default retry would sleep on
        # every refused connection. A short read timeout: a squatter on the port may never answer.
        common: dict[str, Any] = {
            "socket_timeout": 0.5,
            "socket_connect_timeout": 1.0,
            "retry": Retry(NoBackoff(), 0),
            "password": self.requirepass,
        }
        if self.socket_path is not None:
            return redis.Redis(unix_socket_path=str(self.socket_path), **common)
        return redis.Redis(host=self.host, port=self.port or 0, **common)

    def _config(self) -> dict[str, str]:
        conf: dict[str, str] = {
            "bind": self.host,
            "port": "0" if self.unix_socket else str(self.port),
        }
        if self.socket_path is not None:
            conf["unixsocket"] = quote(str(self.socket_path))
            conf["unixsocketperm"] = "700"
        conf |= durable_config(self.data_dir, self.log_path, self.appendfsync, self.maxmemory)
        if self.requirepass:
            conf["requirepass"] = self.requirepass
        for key, value in self.extra_config.items():
            conf[key.lower()] = value if value != "" else '""'
        return conf

    def start(self, timeout: float = 15.0) -> None:
        """Write the config, spawn the server, and return once it answers with its AOF loaded.

        A no-op when already running. Raises ``ServerError`` with the tail of the server log
        when it exits or is not ready within ``timeout`` seconds (per attempt; a port taken
        under our feet is retried up to three times).
        """
        if self.is_running():
            return
        binary = self.binary or find_valkey_server()
        preload = preload_for(self.allocator, binary)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.socket_path is not None and len(os.fsencode(self.socket_path)) > _SUN_PATH_MAX:
            raise ServerError(
                f"unix socket path too long ({self.socket_path}); use a shorter data dir"
            )
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._spawn_and_wait(binary, timeout, preload)
            except _AddressInUse:
                if attempt == _START_ATTEMPTS:
                    raise
                if self._may_repick_port:
                    self.port = _pick_free_port(self.host)
                else:  # a fixed port: give whoever holds it a moment to let go
                    time.sleep(0.25 * attempt)
            else:
                self._may_repick_port = False
                return

    def _spawn_and_wait(self, binary: str, timeout: float, preload: str | None) -> None:
        write_config(self.config_path, self._config())
        env = None
        if preload is not None:
            env = dict(os.environ)
            # Ours first: whatever the caller preloads still loads, and malloc binds to ours.
            env["LD_PRELOAD"] = " ".join(filter(None, [preload, env.get("LD_PRELOAD")]))
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # stdout/stderr into the log too: errors printed before the logfile is open (a bad
        # config line) then show up in the tail.
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                [binary, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.data_dir,
                env=env,
                close_fds=True,
                start_new_session=False,
                # Own process group: a terminal's Ctrl-C reaches only us, so we stop our
                # workers first and the server last. PDEATHSIG still covers our death.
                process_group=0,
                # Runs between fork and exec: only prctl and getppid, no locks, no imports.
                preexec_fn=die_with_parent(),  # noqa: PLW1509
            )
        self._proc, self.pid = proc, proc.pid
        live_servers.add(self)
        try:
            self._wait_ready(proc, timeout, log_offset)
            self.malloc = malloc_in_use(proc.pid, binary)
            if preload is not None and self.malloc != "jemalloc" and self.allocator == "jemalloc":
                raise ServerError(
                    f"valkey-server started without {preload} (LD_PRELOAD refused; "
                    f"log {self.log_path}):\n{self._log_tail(log_offset)}"
                )
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float, log_offset: int) -> None:
        deadline = time.monotonic() + timeout
        client = self._sync_client()
        try:
            while True:
                code = proc.poll()
                if code is not None:
                    tail = self._log_tail(log_offset)
                    error = _AddressInUse if "Address already in use" in tail else ServerError
                    raise error(
                        f"valkey-server exited with code {code} while starting "
                        f"(log {self.log_path}):\n{tail}"
                    )
                if self._is_ready(client, proc.pid):
                    return
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"valkey-server was not ready within {timeout:g} s "
                        f"(log {self.log_path}):\n{self._log_tail(log_offset)}"
                    )
                time.sleep(_POLL_INTERVAL)
        finally:
            client.close()

    @staticmethod
    def _is_ready(client: redis.Redis, pid: int) -> bool:
        try:
            client.ping()
            # Whoever answers must be our process, not a squatter on a recycled port.
            if client.info("server").get("process_id") != pid:
                return False
            # A server still replaying its AOF would refuse the first command with LOADING.
            return client.info("persistence").get("loading") == 0
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False

    def _log_tail(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-_LOG_TAIL_LINES:]) or "(empty log)"

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (Valkey fsyncs the AOF and exits cleanly), wait, then SIGKILL. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._forget()

    def kill(self) -> None:
        """SIGKILL now and reap, as a crash would; the data dir is kept."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self._forget()

    def restart(self, timeout: float = 15.0) -> None:
        """Stop if running, then start again on the same data dir and the same port/socket."""
        self.stop()
        self.start(timeout)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _forget(self) -> None:
        self._proc = None
        self.pid = None
        self.malloc = None
        live_servers.discard(self)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        # Best effort: __init__ may have failed or the interpreter be shutting down.
        with contextlib.suppress(Exception):
            if getattr(self, "_proc", None) is not None:
                self.stop(timeout=2.0)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.is_running() else "stopped"
        malloc = f" malloc={self.malloc}" if self.malloc and self.is_running() else ""
        return f"<EmbeddedValkey {self.url} {self.appendfsync}{malloc} {state}>"
