"""Light senders first, within each turn of the event loop, before a request costs anything.

The door (:mod:`web.door`) puts light senders first among the requests it holds, but a
request reaches it only after uvicorn has parsed it, built its scope and started its task:
0.4-0.6 ms of the process's one core for a request the door then refuses. When a gang of
mashers starts at once (bench_door: 200 mashers with 8 requests each, 1,600 in one
instant), the honest players' requests wait behind that work in the loop's own order,
150-470 ms, whatever the door decides afterwards.

So the HTTP protocols hand what they read to :class:`Turns` first. Every chunk read in one
turn of the loop is collected; at the end of the turn, a chunk whose sender (its
``Authorization: Bearer`` token) this process has answered before and has at most
:data:`LIGHT_IN_FLIGHT` requests unanswered here, this turn's included, is parsed in
arrival order; any other sender's waits, lightest first (fewest unanswered), and at most
:data:`HEAVY_PER_TURN` of those are parsed a turn, plus :data:`HEAVY_PER_LIGHT` for each
light one parsed in it. The loop keeps
turning while any wait, so nothing waits for long: the heavy are parsed as fast as the
core allows between the light. A chunk without a token (pages, sign-ups, socket
handshakes, a body's later part) is parsed as it came, for the door to weigh by its
address. A connection's chunks keep their order (one waiting holds back its followers,
and its reading pauses meanwhile).

A request that waits here still has its head deadline (:data:`web.connections.HEAD_TIMEOUT_S`,
5 s from its connection's last answer): a flood too deep to parse within it is closed, as
a slow head is.

The count per token is what this process holds, not a rate: it needs no history, so the
first instant of a gang is told apart from an honest player's guess (8 unanswered against
1), and a token not answered yet (every masher's first requests; an honest player's first
guess too) is not light until it has been: when nothing heavy waits, it is parsed in the
same turn all the same. Cost when nothing waits: a regular-expression search per chunk and one callback per
turn.
"""

from __future__ import annotations

import asyncio
import heapq
import re
from collections import deque
from typing import Protocol

from web.door.admit import PLAYER_IN_FLIGHT

__all__ = ["HEAVY_PER_LIGHT", "HEAVY_PER_TURN", "LIGHT_IN_FLIGHT", "Turns", "token_of"]

# A sender with this many requests unanswered is light: the door's own measure of an honest
# player's pace (a guess and a read, or a guess and its retry).
LIGHT_IN_FLIGHT = PLAYER_IN_FLIGHT
# Tokens answered lately, remembered: a token this process has not answered yet is not known
# to be light (a gang's mashers all start with new ones), so it waits with the heavy, the
# first among them.
SEEN_MAX = 100_000
# Heavy requests parsed per turn: at least this many (at ~0.5 ms of the core each, ~4 ms of
# them, which is what a light request that arrives meanwhile waits for), and this many more
# for each light one parsed in the turn: when most senders are heavy only because a
# saturated process answers them slowly (bench_game at 2,000/s offered, 200 players at the
# game's 10 a second), a fixed few a turn broke the process's batches (0.85x scored, 1.23x
# the web CPU per guess) without protecting anyone.
HEAVY_PER_TURN = 8
HEAVY_PER_LIGHT = 4

# The token as the app reads it (web.door.middleware.authorization): the header's first
# value. Header names are case-insensitive; a chunk that starts a request carries its head.
_BEARER = re.compile(rb"\nauthorization:[ \t]*bearer[ \t]+([^\s,]+)", re.IGNORECASE)


def token_of(data: bytes) -> bytes | None:
    """The bearer token in a chunk of a request head, or None."""
    found = _BEARER.search(data)
    return found.group(1) if found is not None else None


class Reader(Protocol):
    """What :class:`Turns` needs of a connection: its parse, and its reading paused."""

    turn_backlog: deque[tuple[bytes, bytes | None]] | None  # its chunks waiting, in order
    turn_senders: deque[bytes]  # the tokens of its requests counted and not yet answered
    turn_closed: bool

    def parse(self, data: bytes) -> None: ...

    def hold_reading(self, held: bool) -> None: ...


class Turns:
    """One loop's order of parsing: light senders first, heavy ones bounded per turn."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        heavy_per_turn: int = HEAVY_PER_TURN,
        heavy_per_light: int = HEAVY_PER_LIGHT,
        light_in_flight: int = LIGHT_IN_FLIGHT,
    ) -> None:
        self._loop = loop
        self.heavy_per_turn = heavy_per_turn
        self.heavy_per_light = heavy_per_light
        self.light_in_flight = light_in_flight
        self.held: dict[bytes, int] = {}  # token -> requests read and not yet answered
        self.seen: dict[bytes, None] = {}  # tokens answered, least recently first
        self._arrived: list[tuple[Reader, bytes, bytes | None]] = []
        self._waiting: list[tuple[int, int, Reader]] = []  # (weight, order, connection)
        self._order = 0
        self._due = False
        self.deferred = 0  # chunks that waited a turn or more (the tests read it)

    def offer(self, conn: Reader, data: bytes) -> None:
        """``data`` read on ``conn``: parsed at the end of this turn, or later if heavy."""
        token = token_of(data)
        if token is not None:
            self.held[token] = self.held.get(token, 0) + 1
            conn.turn_senders.append(token)
        if conn.turn_backlog is not None:
            conn.turn_backlog.append((data, token))
            return
        self._arrived.append((conn, data, token))
        self._schedule()

    def answered(self, conn: Reader) -> None:
        """``conn`` finished a response: its oldest counted request is answered."""
        if conn.turn_senders:
            token = conn.turn_senders.popleft()
            self._release(token)
            seen = self.seen
            seen.pop(token, None)
            seen[token] = None
            if len(seen) > SEEN_MAX:
                del seen[next(iter(seen))]

    def closed(self, conn: Reader) -> None:
        """``conn`` is gone (or handed to a websocket): its counted requests are done."""
        conn.turn_closed = True
        conn.turn_backlog = None
        while conn.turn_senders:
            self._release(conn.turn_senders.popleft())

    def _release(self, token: bytes) -> None:
        left = self.held.get(token, 0) - 1
        if left > 0:
            self.held[token] = left
        else:
            self.held.pop(token, None)

    def _schedule(self) -> None:
        if not self._due:
            self._due = True
            (self._loop or asyncio.get_running_loop()).call_soon(self._turn)

    def _turn(self) -> None:
        self._due = False
        arrived, self._arrived = self._arrived, []
        light = 0
        for conn, data, token in arrived:
            if conn.turn_closed:
                continue
            if conn.turn_backlog is not None:  # an earlier chunk of it waits
                conn.turn_backlog.append((data, token))
            elif token is None or self._light(token):
                conn.parse(data)
                light += 1
            else:
                self._wait(conn, deque([(data, token)]))
        heavy = self.heavy_per_turn + self.heavy_per_light * light
        for _ in range(min(heavy, len(self._waiting))):
            _, _, conn = heapq.heappop(self._waiting)
            self._resume(conn)
        if self._waiting:
            self._schedule()

    def _light(self, token: bytes) -> bool:
        return token in self.seen and self.held.get(token, 0) <= self.light_in_flight

    def _wait(self, conn: Reader, backlog: deque[tuple[bytes, bytes | None]]) -> None:
        """``conn`` waits with ``backlog``, whose first chunk is a heavy sender's."""
        conn.turn_backlog = backlog
        conn.hold_reading(True)
        self.deferred += 1
        self._order += 1
        token = backlog[0][1]
        weight = self.held.get(token, 0) if token is not None else 0
        heapq.heappush(self._waiting, (weight, self._order, conn))

    def _resume(self, conn: Reader) -> None:
        """Parse ``conn``'s waiting chunks, up to the next heavy one (which waits again)."""
        backlog = conn.turn_backlog
        if backlog is None or conn.turn_closed:
            return  # closed while it waited
        conn.turn_backlog = None
        conn.hold_reading(False)
        data, _ = backlog.popleft()
        conn.parse(data)
        while backlog and conn.turn_backlog is None and not conn.turn_closed:
            data, token = backlog.popleft()
            if token is not None and not self._light(token):
                backlog.appendleft((data, token))
                self._wait(conn, backlog)
                return
            conn.parse(data)
