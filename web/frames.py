"""Websocket frames built once and written to many sockets.

A server's frames are not masked (RFC 6455 §5.1), so one message's frame is the same bytes
on every socket: the hub frames a broadcast once and each socket costs one
``transport.write`` of those bytes — no per-socket encoding, task, queue or ASGI message.

uvicorn's ASGI ``send`` cannot do that (it frames every message again, per socket, and
waits on the socket's flow control), so :class:`FramesProtocol` — uvicorn's own sans-I/O
websocket protocol, which :mod:`web.server` always serves with — adds one ASGI extension,
``scope["extensions"]["codemojex.frames"]``: the socket itself, as a :class:`FrameSink`.
Everything else (the handshake, reading, pings, the closing handshake) stays uvicorn's.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Protocol

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

EXTENSION = "codemojex.frames"
# 1013 "try again later": the backend failed the socket, or a full process made room; the
# page reconnects with backoff.
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_TIMEOUT_S = 2.0  # how long a socket may take to take our close frame before it is cut


def text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked text frame carrying ``payload`` (UTF-8 JSON)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x81, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x81, 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 127, n)
    return head + payload


class FrameSink(Protocol):
    """A socket the hub writes whole frames to."""

    def write_frame(self, frame: bytes) -> bool:
        """Write ``frame`` now; False when the socket is closing or gone."""
        ...

    def buffered(self) -> int:
        """Bytes written and not yet taken by the kernel (what a slow reader leaves)."""
        ...

    def close_now(self, code: int) -> None:
        """Send a close frame with ``code`` and end the app's side of the socket."""
        ...


class _Inbox:
    """The protocol's queue of ASGI events for the app: one consumer, so a list and one
    waiter instead of ``asyncio.Queue``'s three deques (about 2.3 KB a socket)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)


class _Flag:
    """``asyncio.Event`` for one flag few ever wait on (uvicorn's ``writable``): no deque
    (about 0.8 KB a socket) until someone waits."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        while not self._set:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)


class FramesProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O websocket protocol, plus the ``codemojex.frames`` extension, and
    lighter where a process holds thousands: the app's inbox and the writable flag are
    small single-purpose objects, and the handshake's request and response (their
    headers) are let go once the socket is accepted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = _Inbox()  # type: ignore[assignment]
        self.writable = _Flag()  # type: ignore[assignment]
        self.writable.set()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.accept" and self.handshake_complete:
            self.request = self.response = None  # type: ignore[assignment]

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        # The app's task was only created, not run: the scope it reads is still this one.
        if scope is not None and self.response.status_code == 101:
            scope["extensions"][EXTENSION] = self

    def _open(self) -> bool:
        return (
            self.handshake_complete
            and not self.close_sent
            and not self.disconnected
            and not self.transport.is_closing()
        )

    def write_frame(self, frame: bytes) -> bool:
        if not self._open():
            return False
        self.transport.write(frame)
        return True

    def buffered(self) -> int:
        return int(self.transport.get_write_buffer_size())

    def close_now(self, code: int) -> None:
        """Close from outside the app's task (the hub evicting a slow socket): the app's
        next ``receive`` answers a disconnect with ``code``. A reader too slow to take
        what was written may never read the close frame either, so the connection is cut
        after :data:`CLOSE_TIMEOUT_S` whether or not the peer echoed it."""
        if not self._open():
            return
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": ""})
        self.conn.send_close(code, "")
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:  # keep reading: the peer's close echo ends it early
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(CLOSE_TIMEOUT_S, self.transport.abort)
