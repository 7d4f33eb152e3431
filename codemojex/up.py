"""``codemojex up``: the whole game on one machine — an embedded Valkey (unless one is
given), the migrations, and a supervisor over the web processes and the workers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import secrets
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from codemojex.config import Config
from codemojex.launch import (
    Fatal,
    agree_on_layout,
    check_external,
    child_env,
    config_of,
    migrate_or_fail,
    redact,
)

if TYPE_CHECKING:
    from echomq.server import EmbeddedValkey


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


def run(args: argparse.Namespace) -> int:
    from echomq.errors import ServerError
    from echomq.server import Appendfsync, EmbeddedValkey, find_valkey_server

    # SIGTERM behaves like Ctrl-C until the supervisor takes over: `finally` blocks run.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    config = config_of(args)
    config = config.with_(data_dir=config.data_dir.expanduser().absolute())
    valkey: EmbeddedValkey | None = None
    # Everything up and its children create is the operator's alone: the AOF, the SQLite
    # file and its journal, the admin token, Valkey's config with its password.
    os.umask(0o077)
    with _exclusive(config.data_dir):
        try:
            _port_free(config.host, config.port)
            if config.valkey_url:
                check_external(config.valkey_url)
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
            migrate_or_fail(config.sql_url)
            agree_on_layout(config)
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
