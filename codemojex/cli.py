"""The ``codemojex`` command: ``up`` (the whole game on one machine), ``web``, ``worker``,
``migrate``, ``mash`` (the load script).

Configuration comes from flags over ``CODEMOJEX_*`` environment variables over defaults
(:meth:`Config.from_env`). Each setting is declared once, in codemojex.config; the flags
below, their help, the variables, the checks and what ``up`` hands its children through
the same variables (so every process agrees on the URLs and the admin token) are derived
from it by codemojex.settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import re
import secrets
import signal
import socket
import sys
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from codemojex import settings
from codemojex.config import Config, ConfigError, ProcessOptions

T = TypeVar("T")

if TYPE_CHECKING:
    from echomq.server import EmbeddedValkey

log = logging.getLogger("codemojex")

GRACEFUL_SHUTDOWN_S = 5


class Fatal(Exception):
    """A one-line message for the operator instead of a traceback, and an exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# The parser


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag costs one line on stderr (and where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("codemojex")
    except PackageNotFoundError:  # a bare checkout on sys.path
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full ``codemojex`` parser (also used by tests/test_compose.py to check commands).

    Every flag that a ``CODEMOJEX_*`` variable can also set names it in its help."""
    parser = _Parser(
        prog="codemojex",
        description="Real-time many-player emoji Mastermind on EchoMQ. Flags override "
        "CODEMOJEX_* environment variables, which override the defaults.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # Every flag of these four comes from a setting's one declaration (codemojex.config).
    helps = {
        "up": "the whole game on one machine",
        "web": "one web server",
        "worker": "one ScoreWorker",
        "migrate": "alembic upgrade head",
    }
    runs = {"up": _up, "web": _web, "worker": _worker, "migrate": _migrate}
    for name, what in helps.items():
        role = sub.add_parser(name, help=what)
        settings.add_flags(role, name, ProcessOptions, Config)
        role.set_defaults(run=runs[name])

    from codemojex.mash import command as mash_command  # import-light: flags only

    mash = sub.add_parser("mash", help="keyboard mashers and chaos against a running game")
    mash_command.add_arguments(mash)
    mash.set_defaults(run=mash_command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = build_parser().parse_args(argv)
    from codemojex.logs import configure

    try:
        options = _options(args)
        level = options.log_level or ("warning" if args.command == "mash" else "info")
        args.log_level = level
        configure(level, "json" if options.log_format == "json" else "text")
        code = args.run(args)
    except Fatal as e:
        print(f"codemojex: {e}", file=sys.stderr)
        code = e.code
    except ConfigError as e:  # a CODEMOJEX_* variable that cannot be read: one line
        print(f"codemojex: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def _options(args: argparse.Namespace) -> ProcessOptions:
    """This process's own settings: flags over CODEMOJEX_* over defaults."""
    return ProcessOptions.from_env(**settings.given(args, ProcessOptions))


def _config(args: argparse.Namespace) -> Config:
    """Flags over CODEMOJEX_* over defaults, checked (codemojex.settings.check)."""
    return Config.from_env(**settings.given(args, Config))


def child_env(config: Config) -> dict[str, str]:
    """Our environment plus the resolved configuration as CODEMOJEX_* variables."""
    return config.to_env(os.environ)


def _require_valkey(config: Config, command: str) -> str:
    """The role's Valkey URL; a server that answers must be durable. One that does not
    answer yet is no reason to stop: web answers 503 and workers retry until it is up."""
    if not config.valkey_url:
        raise Fatal(
            f"`codemojex {command}` needs --valkey-url (or CODEMOJEX_VALKEY_URL); "
            "`codemojex up` runs everything on one machine"
        )
    _check_external(config.valkey_url, unreachable_ok=True)
    _agree_on_layout(config, unreachable_ok=True)
    return config.valkey_url


# ---------------------------------------------------------------------------------------------
# Single roles


def _web(args: argparse.Namespace) -> int:
    config = _config(args)
    access_log = _options(args).access_log
    _require_valkey(config, "web")
    _private_files(config, admin_token=True)

    import uvicorn

    from web.app import create_app
    from web.connections import plan_connections
    from web.server import server_config

    # The open-files limit raised for the sockets, or the caps cut to it: one address
    # must never hold every descriptor, or the process stops accepting anyone.
    plan = plan_connections(config.sockets_per_process, config.connections_per_address)
    config = config.with_(sockets_per_process=plan.sockets_per_process)
    server = uvicorn.Server(
        server_config(
            create_app(config),
            host=config.host,
            port=config.port,
            graceful_shutdown_s=GRACEFUL_SHUTDOWN_S,
            access_log=access_log,
            log_level=args.log_level,
            forwarded_allow_ips=config.forwarded_allow_ips,
            connections_per_process=plan.per_process,
            connections_per_address=plan.per_address,
            headers=_run_header(),
        )
    )
    if config.web_processes > 1:
        # One of several web processes of one `up`: each binds the port with SO_REUSEPORT.
        # Only then: a lone server must fail on a port someone else holds.
        try:
            listener = shared_port_socket(config.host, config.port)
        except OSError as e:
            raise Fatal(f"cannot listen on {config.host}:{config.port}: {e}", 1) from None
        server.run(sockets=[listener])
    else:
        server.run()
    return 0 if server.started else 1


def _run_header() -> list[tuple[str, str]]:
    """Under ``up``, the header that tells its health check this server is its own."""
    from codemojex.supervisor import RUN_ENV, RUN_HEADER

    nonce = os.environ.get(RUN_ENV)
    return [(RUN_HEADER, nonce)] if nonce else []


def _private_files(config: Config, *, admin_token: bool = False) -> None:
    """Every file this process creates is its owner's alone, as under ``up``: the SQLite
    file (it holds the open round's secret) and its journals, the generated admin token.
    The data dir, where one of them lives (SQLite by default; the admin token when
    ``admin_token`` and none is set), is made private (0700), created so if need be."""
    os.umask(0o077)
    if config.database_url is not None and not (admin_token and not config.admin_token):
        return  # nothing of this process lives in the data dir
    data_dir = config.data_dir.expanduser()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    except OSError as e:
        raise Fatal(f"cannot make the data dir {data_dir} private: {e}") from None


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` with SO_REUSEPORT, for several processes."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def _worker(args: argparse.Namespace) -> int:
    config = _config(args)
    _require_valkey(config, "worker")
    _private_files(config)

    from codemojex.worker import run_worker

    run_loop(run_worker(config, _options(args).worker_id))
    return 0


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (it is a dependency on Linux): the
    worker's claim, score and complete cycle spends a good part of its CPU in the loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def _migrate(args: argparse.Namespace) -> int:
    config = _config(args)
    _private_files(config)
    _migrate_or_fail(config.sql_url)
    print(f"database at head: {redact(config.sql_url)}")
    return 0


# ---------------------------------------------------------------------------------------------
# up


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _exclusive(data_dir: Path) -> Iterator[None]:
    """One ``up`` per data dir: two embedded servers on one AOF would corrupt it.

    The data dir is private (0700): it holds the AOF (every open round's secret), the
    SQLite file, the admin token and Valkey's password."""
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    with open(data_dir / "up.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Fatal(f"another `codemojex up` is running on {data_dir}") from None
        yield


def _secret_in(data_dir: Path, name: str) -> str:
    """A random secret kept in ``data_dir/name`` (created once, 0600), shared by restarts."""
    path = data_dir / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    secret = secrets.token_urlsafe(24)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret


def _up(args: argparse.Namespace) -> int:
    from echomq.errors import ServerError
    from echomq.server import Appendfsync, EmbeddedValkey, find_valkey_server

    # SIGTERM behaves like Ctrl-C until the supervisor takes over: `finally` blocks run.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    config = _config(args)
    config = config.with_(data_dir=config.data_dir.expanduser().absolute())
    valkey: EmbeddedValkey | None = None
    # Everything up and its children create is the operator's alone: the AOF, the SQLite
    # file and its journal, the admin token, Valkey's config with its password.
    os.umask(0o077)
    with _exclusive(config.data_dir):
        try:
            _port_free(config.host, config.port)
            if config.valkey_url:
                _check_external(config.valkey_url)
            else:
                try:
                    binary = find_valkey_server()
                except ServerError as e:  # the contract's one line on how to get one
                    raise Fatal(str(e)) from None
                valkey = EmbeddedValkey(
                    config.data_dir / "valkey",
                    binary=binary,
                    appendfsync=cast(Appendfsync, config.appendfsync),
                    requirepass=_secret_in(config.data_dir, "valkey_password"),
                )
                try:
                    valkey.start()
                except ServerError as e:
                    raise Fatal(f"the embedded Valkey did not start: {e}", 1) from None
                config = config.with_(valkey_url=valkey.url)
            config = config.with_(database_url=config.sql_url)
            _migrate_or_fail(config.sql_url)
            _agree_on_layout(config)
            config = config.with_(admin_token=config.resolve_admin_token())
            return _supervise(config, args.log_level, valkey, args.log_format)
        except KeyboardInterrupt:  # a signal before the supervisor took over
            print("codemojex: stopped", file=sys.stderr)
            return 0
        finally:
            # Valkey stops last, after every worker and the web server; nothing interrupts it.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if valkey is not None:
                valkey.stop()


def _port_free(host: str, port: int) -> None:
    """Fail before anything starts when another server listens on ``host:port``: its
    answers would otherwise pass for our web server's."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:
        raise Fatal(
            f"port {port} on {host} is taken ({e.strerror or e}): stop what listens "
            "there or choose another --port",
            1,
        ) from None


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for printing."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def _check_external(url: str, *, unreachable_ok: bool = False) -> None:
    import redis

    from echomq.connection import node_urls
    from echomq.errors import NotDurable
    from echomq.server import check_durable_sync

    conn: Any = None
    where = url  # the node a refusal names
    timeouts = {"socket_timeout": 5, "socket_connect_timeout": 5}
    try:
        # On a cluster, every node, replicas too: any of them may be a master tomorrow.
        for where in node_urls(url, **timeouts):
            conn = redis.Redis.from_url(where, **timeouts)
            check_durable_sync(conn)
            conn.close()
            conn = None
    except NotDurable as e:
        raise Fatal(f"refusing {redact(where)}: {e}") from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        if not unreachable_ok:
            raise Fatal(f"cannot reach Valkey at {redact(url)}: {e}") from None
        print(
            f"codemojex: Valkey at {redact(url)} is not reachable yet ({e}); "
            "carrying on, its durability unchecked",
            file=sys.stderr,
        )
    except redis.RedisError as e:
        raise Fatal(f"cannot use Valkey at {redact(url)}: {e}") from None
    finally:
        if conn is not None:
            conn.close()


def _agree_on_layout(config: Config, *, unreachable_ok: bool = False) -> None:
    """Before anything starts: this game's queue partitions are the ones recorded in
    Valkey (a game of another layout is refused, with what to do). A web or worker whose
    Valkey does not answer yet checks again once it does (web: on the first guess)."""
    import redis
    from redis.exceptions import RedisClusterException

    from codemojex.layout import LayoutMismatch, agree_sync
    from echomq.connection import connect_sync

    assert config.valkey_url
    conn: Any = None
    try:
        conn = connect_sync(config.valkey_url, socket_timeout=5, socket_connect_timeout=5)
        agree_sync(conn, config.partitions)
    except LayoutMismatch as e:
        raise Fatal(str(e)) from None
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as e:
        if not unreachable_ok:
            raise Fatal(f"cannot reach Valkey at {redact(config.valkey_url)}: {e}") from None
    except redis.RedisError as e:
        raise Fatal(f"cannot use Valkey at {redact(config.valkey_url)}: {e}") from None
    finally:
        if conn is not None:
            conn.close()


def _migrate_or_fail(url: str) -> None:
    from codemojex.store import migrate

    try:
        migrate(url)
    except Exception as e:  # noqa: BLE001 - one line for the operator
        raise Fatal(f"migrating {redact(url)} failed: {type(e).__name__}: {e}", 1) from None


def _supervise(
    config: Config, log_level: str, valkey: EmbeddedValkey | None, log_format: str | None = None
) -> int:
    from codemojex.supervisor import Supervisor

    me = [sys.executable, "-m", "codemojex"]
    shared = ["--data-dir", str(config.data_dir), "--log-level", log_level]
    if log_format is not None:
        shared += ["--log-format", log_format]
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(config.host, config.host)
    base = f"http://{_bracket(probe)}:{config.port}"
    supervisor = Supervisor(
        str(config.valkey_url),
        env=child_env(config),
        worker_argv=[*me, "worker", *shared],
        workers=config.workers,
        web_argv=[*me, "web", "--host", config.host, "--port", str(config.port), *shared],
        web_processes=config.web_processes,
        worker_metrics_port=config.metrics_port,
        health_url=f"{base}/healthz",
        on_ready=lambda sup: _banner(config, base, sup.supervisor_id, valkey is not None),
        embedded=valkey,
        run_nonce=secrets.token_urlsafe(12),
    )
    code = asyncio.run(supervisor.run())
    if supervisor.failure:
        print(f"codemojex: {supervisor.failure}", file=sys.stderr)
    else:
        print("codemojex: stopped", file=sys.stderr)
    return code


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _banner(config: Config, base: str, supervisor_id: str, embedded: bool) -> None:
    from rich.console import Console
    from rich.markup import escape

    valkey = redact(str(config.valkey_url))
    if embedded:
        valkey += f" (embedded, appendfsync {config.appendfsync}, AOF in {config.data_dir}/valkey)"
    rows = [
        ("play", f"{base}/"),
        ("admin", f"{base}/admin"),
        ("admin token", str(config.admin_token)),
        ("valkey", valkey),
        ("database", redact(config.sql_url)),
        ("workers", f"{config.workers} (supervisor {supervisor_id})"),
        ("web", f"{config.web_processes} process(es) on port {config.port}"),
    ]
    if config.metrics_port:
        last = config.metrics_port + max(config.workers, 1) - 1
        rows.append(("metrics", f"{base}/metrics; workers on ports {config.metrics_port}-{last}"))
    console = Console(soft_wrap=True, highlight=False)
    console.print("[bold green]Codemojex is up[/]")
    for label, value in rows:
        console.print(f"  [bold]{label:<12}[/] {escape(value)}")
    console.print("  Ctrl-C stops everything.")
    sys.stdout.flush()
