"""The client's raw HTTP/1.1: requests pre-encoded as bytes, answers parsed in
``data_received``, a pool of keep-alive connections that pipelines when none is idle; a
guess's timestamps and a window's tally."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from bench.game.options import now

REQUEST_TIMEOUT_S = 15.0


class HttpError(Exception):
    """A setup call got an answer the benchmark cannot go on with."""


def encode_request(
    method: str,
    path: str,
    host: str,
    body: bytes | None = None,
    token: str | None = None,
    close: bool = False,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, the server will close): the status line, ``Content-Length`` and the
    body's bytes; no other header is looked at but ``Connection: close``."""
    head = (await reader.readuntil(b"\r\n\r\n")).lower()
    status = int(head[9:12])
    i = head.find(b"\r\ncontent-length:")
    if i < 0:
        if b"\r\ntransfer-encoding:" in head:
            raise ValueError("chunked answers are not expected from this server")
        n = 0
    else:
        n = int(head[i + 17 : head.index(b"\r\n", i + 17)])
    body = await reader.readexactly(n) if n else b""
    return status, body, b"\r\nconnection: close" in head


async def http_once(
    host: str, port: int, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    """One request on a fresh connection (setup and control only): (status, decoded JSON)."""
    data = None if body is None else orjson.dumps(body)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    try:
        writer.write(encode_request(method, path, f"{host}:{port}", data, token, close=True))
        status, raw, _ = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    try:
        return status, orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return status, raw.decode(errors="replace")


class Guess:
    __slots__ = (
        "answered",
        "error",
        "job_id",
        "player",
        "scheduled",
        "scored",
        "scored_on",
        "scores",
        "sent",
        "status",
        "window",
    )

    def __init__(self, window: Window, player: int, scheduled: float) -> None:
        self.window = window
        self.player = player
        self.scheduled = scheduled
        self.sent = 0.0
        self.answered: float | None = None
        self.status = 0
        self.error: str | None = None
        self.job_id: str | None = None
        self.scored: float | None = None
        self.scored_on: int | None = None
        self.scores = 0  # how many score messages named its job: exactly one is right


@dataclass
class Window:
    rate: float
    duration: float
    planned: int = 0  # sends in the schedule
    t0: float = 0.0
    load_end: float = 0.0  # the last send
    drain_end: float = 0.0
    guesses: list[Guess] = field(default_factory=list)
    answered: int = 0
    accepted: int = 0
    scored: int = 0
    pipelined: int = 0  # sends that found no idle connection
    score_before_202: int = 0
    drained: bool = False
    backlog: dict[str, int] | None = None  # the queue at the end of the load
    ws_messages: Counter[str] = field(default_factory=Counter)
    ws_bytes: Counter[str] = field(default_factory=Counter)
    ws_closes: Counter[str] = field(default_factory=Counter)


class HttpConn(asyncio.Protocol):
    """One keep-alive connection. Answers are parsed in ``data_received`` (no task or
    coroutine per answer) and timestamped on arrival; they come back in the order sent."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.pending: deque[Guess] = deque()
        self.buf = b""
        self.alive = True
        self.idle = False  # in the pool's idle queue
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        t = now()
        buf = self.buf + data if self.buf else data
        pos, close = 0, False
        try:
            while not close:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                head = buf[pos:end].lower()
                i = head.find(b"\r\ncontent-length:")
                if i < 0:
                    n = 0
                else:
                    j = head.find(b"\r\n", i + 17)
                    n = int(head[i + 17 : j if j >= 0 else len(head)])
                if len(buf) < end + 4 + n:
                    break
                self.pool.answer(
                    self.pending.popleft(), int(head[9:12]), buf[end + 4 : end + 4 + n], t
                )
                pos = end + 4 + n
                close = b"\r\nconnection: close" in head
        except (ValueError, IndexError, KeyError):  # nonsense, or an answer to nothing asked
            close = True
        self.buf = buf[pos:]
        if close:
            self.pool.lost(self)
        elif not self.pending and not self.idle:
            self.idle = True
            self.pool.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)  # the server closed it (its keep-alive timeout) or it broke


class Pool:
    """``n`` keep-alive connections; :meth:`send` writes pre-encoded bytes on an idle one, or
    pipelines them on the next busy one, so a send is never delayed by an answer."""

    def __init__(
        self, host: str, port: int, answer: Callable[[Guess, int, bytes, float], None]
    ) -> None:
        self.host, self.port, self.answer = host, port, answer
        self.conns: list[HttpConn] = []
        self.idle: deque[HttpConn] = deque()
        self.rr = 0
        self.closing = False
        self._reopening: set[asyncio.Task[None]] = set()

    async def open(self, n: int) -> Pool:
        await asyncio.gather(*(self._add() for _ in range(n)))
        return self

    async def _add(self) -> None:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: HttpConn(self), self.host, self.port)
        self.conns.append(conn)
        conn.idle = True
        self.idle.append(conn)

    def send(self, data: bytes, guess: Guess) -> None:
        if self.idle:
            conn = self.idle.popleft()
            conn.idle = False
        elif self.conns:
            conn = self.conns[self.rr % len(self.conns)]
            self.rr += 1
            guess.window.pipelined += 1
        else:
            self.answer(guess, 0, b"no_connection", now())
            return
        conn.pending.append(guess)
        assert conn.transport is not None
        conn.transport.write(data)

    def lost(self, conn: HttpConn) -> None:
        if not conn.alive:
            return
        conn.alive = False
        with contextlib.suppress(ValueError):
            self.conns.remove(conn)
        if conn.idle:
            conn.idle = False
            self.idle.remove(conn)
        if conn.transport is not None:
            conn.transport.close()
        if self.closing:
            return  # what is still pending stays unanswered
        t = now()
        while conn.pending:
            self.answer(conn.pending.popleft(), 0, b"connection_lost", t)
        if not self.closing:
            task = asyncio.create_task(self._add())
            self._reopening.add(task)
            task.add_done_callback(self._reopening.discard)

    async def close(self) -> None:
        self.closing = True
        for task in self._reopening:
            task.cancel()
        await asyncio.gather(*self._reopening, return_exceptions=True)
        for conn in list(self.conns):
            self.lost(conn)
