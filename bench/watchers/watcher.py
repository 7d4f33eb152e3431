"""One watcher: a socket that only reads, counting bytes, data frames and ``progress``
messages by their headers and first bytes, answering PINGs with a masked PONG."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import time
from typing import cast

now = time.perf_counter  # CLOCK_MONOTONIC: one clock across processes
PROGRESS = b'{"type":"progress"'
_PLEN = len(PROGRESS)
GREET_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0
MASK = os.urandom(4)  # a client's frames are masked (RFC 6455 5.3); one key is enough here

CONNECTING, OPEN, CLOSING, DONE = range(4)


def raise_nofile() -> int:
    """The soft limit on open files raised to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def _masked(opcode: int, payload: bytes) -> bytes:
    """One client frame (FIN, ``opcode``) with a payload of at most 125 bytes."""
    body = bytes(b ^ MASK[i & 3] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + MASK + body


class Watcher(asyncio.Protocol):
    """One read-only socket. ``data_received`` walks frame headers only: a data frame's
    payload is skipped (counted, never copied, unless it is split mid-header or within the
    progress prefix); control frames are read whole (at most 125 bytes)."""

    __slots__ = (
        "bytes",
        "code",
        "done",
        "frames",
        "greeted",
        "head",
        "pend",
        "pings",
        "progress",
        "request",
        "skip",
        "state",
        "transport",
        "we_closed",
    )

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.state = CONNECTING
        self.head = b""
        self.pend = b""
        self.skip = 0
        self.bytes = 0
        self.frames = 0
        self.progress = 0
        self.pings = 0
        self.code: str | None = None  # why it ended: a close code, "abnormal", "handshake 403"
        self.we_closed = False
        loop = asyncio.get_running_loop()
        self.greeted: asyncio.Future[None] = loop.create_future()  # the first frame, or ended
        self.done: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.state != CONNECTING:
            self._frames(data)
            return
        head = self.head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self.head = head
            if len(head) > 16384:
                self._end("handshake garbage")
            return
        self.head = b""
        if head[9:12] != b"101":
            self._end(f"handshake {head[9:12].decode(errors='replace')}")
            return
        self.state = OPEN
        if len(head) > end + 4:
            self._frames(head[end + 4 :])

    def _frames(self, data: bytes) -> None:
        n = len(data)
        self.bytes += n
        skip = self.skip
        if skip:
            if skip >= n:
                self.skip = skip - n
                return
            data = data[skip:]
            self.skip = 0
        if self.pend:
            data = self.pend + data
            self.pend = b""
        pos, end = 0, len(data)
        while end - pos >= 2:
            b1 = data[pos + 1]
            ln = b1 & 127
            h = pos + 2
            if ln == 126:
                if end - pos < 4:
                    break
                ln = (data[pos + 2] << 8) | data[pos + 3]
                h = pos + 4
            elif ln == 127:
                if end - pos < 10:
                    break
                ln = int.from_bytes(data[pos + 2 : pos + 10], "big")
                h = pos + 10
            if b1 & 128:  # a masked server frame: not the protocol
                self._end("protocol error")
                return
            op = data[pos] & 15
            if op & 8:  # control: read whole
                if end - h < ln:
                    break
                self._control(op, data[h : h + ln])
                pos = h + ln
                continue
            if op == 1 and end - h < min(_PLEN, ln):
                break  # wait for the prefix
            self.frames += 1
            if op == 1 and data.startswith(PROGRESS, h):
                self.progress += 1
            if not self.greeted.done():
                self.greeted.set_result(None)
            pos = h + ln
            if pos > end:
                self.skip = pos - end
                return
        if pos < end:
            self.pend = data[pos:]

    def _control(self, op: int, payload: bytes) -> None:
        assert self.transport is not None
        if op == 9:  # PING: a masked PONG with its payload
            self.pings += 1
            if self.state == OPEN:
                self.transport.write(_masked(10, payload))
        elif op == 8:  # CLOSE
            code = str(int.from_bytes(payload[:2], "big")) if len(payload) >= 2 else "1005"
            if self.code is None:
                self.code = code
            if self.state == OPEN:  # the server's: answer it; it then closes the TCP
                self.transport.write(_masked(8, payload[:2]))
            self.state = CLOSING

    def close(self) -> None:
        """Start the closing handshake (1000); the server answers, then drops the TCP."""
        if self.state == OPEN and self.transport is not None:
            self.we_closed = True
            self.state = CLOSING
            self.transport.write(_masked(8, (1000).to_bytes(2, "big")))
        elif self.state == CONNECTING and self.transport is not None:
            self._end("closed connecting")

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(self.code or "abnormal")

    def _end(self, code: str) -> None:
        if self.code is None:
            self.code = code
        self.state = DONE
        if self.transport is not None:
            self.transport.close()
        for fut in (self.greeted, self.done):
            if not fut.done():
                fut.set_result(None)

    def abort(self) -> None:
        if self.transport is not None and self.state != DONE:
            self.transport.abort()
