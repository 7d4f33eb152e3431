"""The single roles: ``codemojex web`` (one web server), ``worker`` (one ScoreWorker) and
``migrate`` (alembic upgrade head)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

from codemojex.collector import quiet_collector
from codemojex.launch import (
    Fatal,
    config_of,
    migrate_or_fail,
    options_of,
    private_files,
    redact,
    require_valkey,
)

T = TypeVar("T")

GRACEFUL_SHUTDOWN_S = 5


def web(args: argparse.Namespace) -> int:
    config = config_of(args)
    access_log = options_of(args).access_log
    require_valkey(config, "web")
    private_files(config, admin_token=True)

    from web.app import create_app
    from web.connections import plan_connections
    from web.server import Server, server_config

    # The open-files limit raised for the sockets, or the caps cut to it: one address
    # must never hold every descriptor, or the process stops accepting anyone.
    plan = plan_connections(config.sockets_per_process, config.connections_per_address)
    config = config.with_(sockets_per_process=plan.sockets_per_process)
    server = Server(
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
            headers=run_header(),
        )
    )
    quiet_collector()
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


def run_header() -> list[tuple[str, str]]:
    """Under ``up``, the header that tells its health check this server is its own."""
    from codemojex.supervisor import RUN_ENV, RUN_HEADER

    nonce = os.environ.get(RUN_ENV)
    return [(RUN_HEADER, nonce)] if nonce else []


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` with SO_REUSEPORT, for several processes."""
    from web.server import bind_tcp

    sock = bind_tcp(host, port, reuse_port=True)
    try:
        sock.listen(2048)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def worker(args: argparse.Namespace) -> int:
    config = config_of(args)
    require_valkey(config, "worker")
    private_files(config)

    from codemojex.worker import run_worker

    quiet_collector()
    run_loop(run_worker(config, options_of(args).worker_id))
    return 0


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop where it is installed (it is a dependency on Linux): the
    worker's claim, score and complete cycle spends a good part of its CPU in the loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def migrate(args: argparse.Namespace) -> int:
    config = config_of(args)
    private_files(config)
    migrate_or_fail(config.sql_url)
    print(f"database at head: {redact(config.sql_url)}")
    return 0
