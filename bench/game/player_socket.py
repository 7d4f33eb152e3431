"""A player and its websocket: frames parsed in ``data_received`` (websockets' sans-I/O
protocol), a score timestamped on arrival; the send schedule of a window."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from bench.game.http import Guess
from bench.game.options import now

if TYPE_CHECKING:
    from bench.game.client import GameClient


@dataclass
class Player:
    index: int
    player_id: str
    token: str
    prefix: bytes  # the guess request up to its Content-Length
    greeted: asyncio.Event = field(default_factory=asyncio.Event)
    sock: Socket | None = None
    after: str | None = None  # the last event id seen: a reconnect resumes from it


class Socket(asyncio.Protocol):
    """One player's websocket on the ``websockets`` library's sans-I/O protocol: frames are
    parsed in ``data_received`` and timestamped there, with no task or future per message,
    so 200 sockets' bursts of progress messages cost the client little and delay no score's
    timestamp behind a queue of wake-ups. No ``Origin`` header: a non-browser client."""

    def __init__(self, client: GameClient, player: Player, uri: str) -> None:
        self.client, self.player = client, player
        self.proto = ClientProtocol(parse_uri(uri), max_size=1 << 24)
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.parts: list[bytes] = []  # a fragmented text message so far
        self.sent: collections.deque[Guess] = collections.deque()  # guess frames unanswered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        self.proto.send_request(self.proto.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        t = now()
        self.proto.receive_data(data)
        for event in self.proto.events_received():
            if isinstance(event, Response):  # the handshake's
                if self.proto.handshake_exc is not None:
                    self._done(f"handshake {event.status_code}")
                continue
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.TEXT or (event.opcode is Opcode.CONT and self.parts):
                if not event.fin:
                    self.parts.append(bytes(event.data))
                    continue
                text = b"".join([*self.parts, event.data]) if self.parts else bytes(event.data)
                self.parts = []
                self.client.message(self.player, text, t)
        self._flush()

    def eof_received(self) -> bool | None:
        self.proto.receive_eof()
        self._flush()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._done(str(self.proto.close_code or "abnormal"))

    def send_guess(self, frame: bytes, guess: Guess) -> bool:
        """Send one guess frame; False if the socket is not open."""
        if self.transport is None or self.transport.is_closing() or self.closed.done():
            return False
        self.sent.append(guess)
        self.proto.send_text(frame)
        self._flush()
        return True

    def close(self) -> None:
        """Start the closing handshake (code 1000)."""
        if self.transport is not None and not self.closed.done():
            with contextlib.suppress(Exception):
                self.proto.send_close(1000)
            self._flush()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _flush(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        for data in self.proto.data_to_send():
            if data:
                self.transport.write(data)
            elif self.transport.can_write_eof():
                self.transport.write_eof()  # the protocol's SEND_EOF: half-close

    def _done(self, code: str) -> None:
        if not self.closed.done():
            self.closed.set_result(code)
        if self.transport is not None and code.startswith("handshake"):
            self.transport.close()


def send_offsets(rate: float, duration: float, kind: str, rng: random.Random) -> list[float]:
    """Send times (s from the window's start): evenly spaced, or Poisson arrivals."""
    if kind == "uniform":
        return [i / rate for i in range(round(rate * duration))]
    out, t = [], rng.expovariate(rate)
    while t < duration:
        out.append(t)
        t += rng.expovariate(rate)
    return out
