"""A small asyncio TCP proxy in front of a real Valkey that loses exactly one reply.

Armed with a marker (the SHA1 of a script), the first command whose bytes carry it is
forwarded to the server, which runs it; the server's reply is then thrown away and the
client's connection closed, as when a network path or a proxy dies between the two. The
client sees ``ConnectionError`` for a command the server applied: what redis-py then does
(it re-sends the command on a new connection, 10 times at most in 8.1) is the test's
subject. Everything else is forwarded untouched.

Armed with ``refuse`` markers instead, every command whose bytes carry all of them is
answered by the proxy with ``refusal`` (an ``OOM`` error) and never reaches the server, as
long as it stays armed: one transition that keeps failing while the rest go through.
It answers at once, so it suits a command sent alone on its connection (redis-py sends one
at a time on a pooled connection, a pipeline of one script call included), not one behind
others still awaiting their replies.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class Arm:
    """Shared by the proxies of one test: the marker to drop one reply of, and counts."""

    marker: bytes = b""
    seen: int = 0  # commands carrying the marker, forwarded
    dropped: int = 0  # replies thrown away
    refuse: tuple[bytes, ...] = ()  # a command carrying all of these is refused, every time
    refusal: bytes = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
    refused: int = 0  # commands answered with the refusal


@dataclass
class ReplyDropper:
    host: str
    port: int
    arm: Arm = field(default_factory=Arm)
    listen_port: int = 0
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> ReplyDropper:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        drop = asyncio.Event()

        async def client_to_server() -> None:
            while data := await reader.read(65536):
                if self.arm.refuse and all(m in data for m in self.arm.refuse):
                    self.arm.refused += 1
                    writer.write(self.arm.refusal)
                    await writer.drain()
                    continue
                if self.arm.marker and self.arm.marker in data:
                    self.arm.seen += 1
                    self.arm.marker = b""  # exactly one
                    drop.set()
                up_w.write(data)
                await up_w.drain()

        async def server_to_client() -> None:
            while data := await up_r.read(65536):
                if drop.is_set():
                    self.arm.dropped += 1
                    return  # the reply is lost; both sides are closed below
                writer.write(data)
                await writer.drain()

        pumps = [
            asyncio.ensure_future(client_to_server()),
            asyncio.ensure_future(server_to_client()),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pumps:
                p.cancel()
            for w in (writer, up_w):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)
