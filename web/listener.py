"""Accepting connections in batches: a listening socket's queue emptied in one turn.

uvloop (0.23) takes, in effect, one connection off a listening socket per turn of its loop
when the loop is busy: a bare protocol doing 1 ms of work per request, its loop blocked
while 1,500 connections arrived, saw them made over 1.5 s, one per request served, where
asyncio's own loop made all 1,500 in 87 ms. Behind a proxy that matters: every request
the door holds keeps one upstream connection, so when a gang of mashers starts at once
nginx opens a connection for each of its 1,600 requests, and an honest request that
needs a new one waits at the back of that queue (1.6-2.2 s, docs/load.md).

:class:`BatchListener` watches the listening socket itself and accepts up to
:data:`ACCEPT_BATCH` connections each time it is readable, handing each to the loop's
``connect_accepted_socket``, so connections are made as soon as they arrive and what is
read on them is ordered by :mod:`web.turns`, not by the listen queue. The connections
themselves stay the loop's own (uvloop's transports).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

__all__ = ["ACCEPT_BATCH", "ACCEPT_RETRY_S", "BatchListener"]

log = logging.getLogger("codemojex.web.listener")

# Connections accepted per readiness: the listen queue of a gang's onset, emptied in a few
# turns, each turn's accepts costing a few milliseconds.
ACCEPT_BATCH = 64
# Out of descriptors (EMFILE): stop accepting this long, as asyncio's own server does,
# rather than spin on a socket that stays readable.
ACCEPT_RETRY_S = 1.0
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class BatchListener:
    """A listening socket served by ``protocol_factory``; what uvicorn keeps as a server
    (``close``, ``wait_closed``). ``own``: close the socket on close (uvicorn closes the
    sockets it was given itself)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        backlog: int,
        batch: int = ACCEPT_BATCH,
        own: bool = False,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._batch = batch
        self._own = own
        self._closed = False
        self._pending: set[asyncio.Task[object]] = set()
        sock.setblocking(False)
        sock.listen(backlog)
        self.sockets = [sock]
        self.accepted = 0
        loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(self._batch):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _OUT_OF_RESOURCES:
                    log.warning("cannot accept connections (%s): pausing %.0f s", e, ACCEPT_RETRY_S)
                    self._loop.remove_reader(self._sock.fileno())
                    self._loop.call_later(ACCEPT_RETRY_S, self._resume)
                    return
                continue  # the peer gave up before we took it (ECONNABORTED and the like)
            self.accepted += 1
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._factory, conn))
            self._pending.add(task)
            task.add_done_callback(self._made)

    def _made(self, task: asyncio.Task[object]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and (e := task.exception()) is not None:
            log.debug("a connection failed as it was made: %s", e)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        if self._own:
            self._sock.close()

    async def wait_closed(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
