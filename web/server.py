"""How a web process is served: the one builder of uvicorn's configuration.

``codemojex up``, ``codemojex web``, the tests and the chaos harness all serve the app
through :func:`server_config`, so what the tests exercise is what production runs.

Websockets are served by :class:`web.frames.FramesProtocol`, uvicorn's sans-I/O protocol
with one extension that lets the hub write a broadcast's frame, built once, straight to
every socket (the websocket endpoint needs it).

Websocket limits: permessage-deflate is off. With it on, a few kilobytes on the wire
inflate into a frame of many megabytes before any size check can run, and compressing
every outgoing score cost about 8 % of the web process's CPU for messages of ~200 bytes.
Frames are capped by the protocol at :data:`WS_MAX_FRAME_BYTES` (closed 1009 before they
are buffered); the app's own check (``web.ws``) refuses text over the contract's 16 KiB
body cap below that, also with 1009.

Connections: each request head must arrive within :data:`web.connections.HEAD_TIMEOUT_S`
(idle keep-alive connections close after :data:`KEEP_ALIVE_S`), and a process caps its
connections in all and per client address at accept (:mod:`web.connections`).

Requests are parsed light senders first (:mod:`web.turns`): what one turn of the loop
reads is parsed at the turn's end, a sender this process has not answered yet or with more
than two requests unanswered after the rest, a few a turn. :class:`Server` accepts up to
64 waiting connections a turn (:mod:`web.listener`), where uvloop's own server takes one.

Logs never carry credentials: uvicorn logs every websocket accept and refusal with the
full path, query string included (``/ws?token=…``), so its loggers get
:class:`RedactCredentials`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from codemojex.logs import RedactCredentials
from web.connections import (
    HEAD_TIMEOUT_S,
    ConnectionGuard,
    GuardedConfig,
    GuardedFrames,
    http_protocol,
)
from web.errors import MAX_BODY_BYTES
from web.listener import BatchListener
from web.turns import Turns

# uvicorn's "websockets-sansio" (its "websockets" is websockets.legacy: deprecated), plus
# the frames extension, releasing its place in the connection count when it closes.
WS_IMPL = GuardedFrames
WS_MAX_FRAME_BYTES = 4 * MAX_BODY_BYTES
# Protocol pings find dead peers; what keeps a quiet socket open through proxies is the
# hub's ping message after 20 idle seconds (web.hub). Each protocol ping wakes its peer,
# and at 10,000 sockets one every 20 s cost about 12 % of the web process's samples
# (py-spy, bench_game --watchers 9800): every 60 s a dead peer is found within 80 s.
WS_PING_INTERVAL_S = 60.0
WS_PING_TIMEOUT_S = 20.0
GRACEFUL_SHUTDOWN_S = 5
KEEP_ALIVE_S = 5

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
log = logging.getLogger("uvicorn.error")


def install_log_redaction() -> None:
    """Put :class:`RedactCredentials` on uvicorn's loggers (idempotent)."""
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())


def server_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    access_log: bool = False,
    graceful_shutdown_s: int = GRACEFUL_SHUTDOWN_S,
    forwarded_allow_ips: str = "",
    connections_per_process: int = 0,
    connections_per_address: int = 0,
    head_timeout_s: float = HEAD_TIMEOUT_S,
    **overrides: Any,
) -> uvicorn.Config:
    """uvicorn's configuration for ``app``: the production settings, wherever it runs.

    ``forwarded_allow_ips`` (``Config.forwarded_allow_ips``): the proxies whose
    X-Forwarded-For sets the client address, which the per-address new-player bucket
    keys on. Empty trusts no proxy: uvicorn's proxy-headers middleware is off and the
    header is ignored, so a client cannot pick its address by sending one (uvicorn's own
    default would trust 127.0.0.1, or its FORWARDED_ALLOW_IPS variable).

    ``overrides`` exist for what legitimately differs between callers (a socket to bind,
    say); the websocket limits and the proxy trust are not among them.

    ``connections_per_process``/``connections_per_address`` (0 = no cap): connections
    past them are closed at accept, the address being the TCP peer (a proxy named in
    ``forwarded_allow_ips`` is not capped as one address); ``head_timeout_s``: how long a
    connection has to send each request head (:func:`web.connections.plan_connections`
    sizes the caps to the open-files limit).
    """
    for fixed in ("ws", "ws_max_size", "ws_per_message_deflate", "proxy_headers", "http"):
        if fixed in overrides:
            raise ValueError(f"{fixed} is fixed by web.server, not per caller")
    install_log_redaction()
    config = GuardedConfig(
        app,
        host=host,
        port=port,
        ws=WS_IMPL,
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_per_message_deflate=False,
        ws_ping_interval=WS_PING_INTERVAL_S,
        ws_ping_timeout=WS_PING_TIMEOUT_S,
        # uvicorn's "auto" protocol (httptools, a dependency: C parsing), guarded; uvloop.
        http=http_protocol(),
        loop="auto",
        timeout_keep_alive=KEEP_ALIVE_S,
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
        lifespan="on",
        log_config=None,
        access_log=access_log,
        log_level=log_level,
        timeout_graceful_shutdown=graceful_shutdown_s,
        **overrides,
    )
    config.connection_guard = ConnectionGuard(
        per_process=connections_per_process,
        per_address=connections_per_address,
        forwarded_allow_ips=forwarded_allow_ips,
    )
    config.head_timeout_s = head_timeout_s
    config.turns = Turns()
    return config


class Server(uvicorn.Server):
    """uvicorn's server whose TCP listeners accept in batches (:mod:`web.listener`): the
    one every web process runs, ``codemojex up`` and ``web`` as the tests."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if config.uds is not None or config.fd is not None or config.ssl is not None:
            await super().startup(sockets=sockets)  # not how a web process is served
            return
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        own = sockets is None
        if sockets is None:
            try:
                sockets = [bind_tcp(config.host, config.port)]
            except OSError as e:
                log.error(e)
                await self.lifespan.shutdown()
                sys.exit(STARTUP_FAILURE)
        loop = asyncio.get_running_loop()
        listeners: list[Any] = [
            BatchListener(loop, sock, create_protocol, backlog=config.backlog, own=own)
            for sock in sockets
        ]
        self.servers = listeners
        if own:
            self._log_started_message(sockets)
        self.started = True


def bind_tcp(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port``, not listening yet (``reuse_port``: with
    SO_REUSEPORT, for several processes on one port)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
