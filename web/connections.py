"""A web process's connections before the app sees them: caps at accept, a deadline on
every request head, and the open-files limit the caps are sized to.

* :class:`ConnectionGuard` counts the process's open connections, in all and per client
  address (:func:`codemojex.admission.address_key`, the TCP peer: an IPv6 /64 is one); a
  connection past either cap is closed at once, before a byte is read. Peers named in
  ``forwarded_allow_ips`` are proxies carrying many players, so the per-address cap
  leaves them alone (only the process's total counts them).
* A connection must complete each request head within :data:`HEAD_TIMEOUT_S` of its
  accept, or of the response before it, or it is closed: uvicorn arms no timer before
  the first request, and none while a request line trickles in after a keep-alive one.
* :func:`plan_connections` raises the soft ``RLIMIT_NOFILE`` up to the hard one, as far
  as ``sockets_per_process`` needs, and sizes the caps to what it got, so one address
  can never hold every descriptor (at ``EMFILE`` the process stops accepting anyone).

The HTTP protocols are uvicorn's own (httptools, or h11 where httptools is missing) with
these hooks; a websocket keeps its connection's place in the count until it closes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from codemojex.admission import address_key
from web.frames import FramesProtocol
from web.turns import Turns

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is a dependency; h11 is uvicorn's own fallback
    HttpToolsProtocol = None  # type: ignore[assignment, misc]

__all__ = [
    "HEAD_TIMEOUT_S",
    "ConnectionGuard",
    "ConnectionPlan",
    "GuardedConfig",
    "GuardedFrames",
    "GuardedH11",
    "GuardedHttpTools",
    "http_protocol",
    "plan_connections",
]

log = logging.getLogger("codemojex.web.connections")

HEAD_TIMEOUT_S = 5.0
# Descriptors a web process needs besides its clients' connections: the Valkey pool (up
# to 100), SQL connections and journals, the listening socket, the event loop's own.
RESERVED_FDS = 160
# Connections beyond the websockets: page loads, API requests, keep-alive ones.
HTTP_ROOM = 1_024

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(forwarded_allow_ips: str) -> tuple[bool, tuple[_Network, ...]]:
    """(every peer is trusted, the networks trusted) from uvicorn's comma-separated list."""
    entries = [e.strip() for e in forwarded_allow_ips.split(",") if e.strip()]
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue  # "*" (below) or a name uvicorn matches literally: no address of ours
    return "*" in entries, tuple(networks)


@dataclass
class ConnectionGuard:
    """The open connections of one process, in all and per client address (0 = no cap)."""

    per_process: int = 0
    per_address: int = 0
    forwarded_allow_ips: str = ""
    open: int = 0
    refused: int = 0
    _held: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._trust_all, self._trusted = trusted_networks(self.forwarded_allow_ips)

    def _is_proxy(self, host: str) -> bool:
        if self._trust_all:
            return True
        if not self._trusted:
            return False
        try:
            addr = ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            return False
        return any(addr in net for net in self._trusted)

    def admit(self, peer: Any) -> str | None:
        """The key a new connection from ``peer`` (a transport's ``peername``) is counted
        under ("" for none: a proxy, a unix socket), or None if it must be closed."""
        if self.per_process and self.open >= self.per_process:
            self.refused += 1
            return None
        host = peer[0] if isinstance(peer, tuple) and peer else None
        key = "" if not isinstance(host, str) or self._is_proxy(host) else address_key(host)
        if key and self.per_address and self._held[key] >= self.per_address:
            self.refused += 1
            return None
        self.open += 1
        if key:
            self._held[key] += 1
        return key

    def release(self, key: str) -> None:
        self.open -= 1
        if key:
            left = self._held[key] - 1
            if left > 0:
                self._held[key] = left
            else:
                del self._held[key]

    def held(self, host: str) -> int:
        return self._held[address_key(host)]


class GuardedConfig(uvicorn.Config):
    """uvicorn's configuration plus the guard and the head deadline, which every protocol
    it builds reads (uvicorn hands a protocol only its config)."""

    connection_guard: ConnectionGuard | None = None
    head_timeout_s: float = HEAD_TIMEOUT_S
    turns: Turns | None = None  # the loop's parse order (web.turns); None parses at once


def _settings(config: uvicorn.Config) -> tuple[ConnectionGuard | None, float]:
    if isinstance(config, GuardedConfig):
        return config.connection_guard, config.head_timeout_s
    return None, HEAD_TIMEOUT_S


class _Ticket:
    """One connection's place in the guard's count and its head deadline."""

    __slots__ = ("delay", "guard", "key", "loop", "timer", "transport")

    def __init__(
        self,
        guard: ConnectionGuard | None,
        key: str,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        delay: float,
    ) -> None:
        self.guard = guard
        self.key: str | None = key
        self.transport = transport
        self.loop = loop
        self.delay = delay
        self.timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """The connection must complete a request head within ``delay`` from now."""
        self.disarm()
        if self.delay > 0:
            self.timer = self.loop.call_later(self.delay, _close, self.transport)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def release(self) -> None:
        self.disarm()
        if self.guard is not None and self.key is not None:
            self.guard.release(self.key)
        self.key = None


def _close(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.close()


class _Guarded(asyncio.Protocol):
    """What both HTTP protocols get, mixed in before uvicorn's class: the guard's say at
    accept, the head deadline from accept on, the connection's place handed to its
    websocket after an upgrade."""

    ticket: _Ticket | None = None
    config: uvicorn.Config
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    flow: Any
    turns: Turns | None = None
    turn_backlog: deque[tuple[bytes, bytes | None]] | None = None
    turn_closed = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        guard, delay = _settings(self.config)
        key = "" if guard is None else guard.admit(transport.get_extra_info("peername"))
        if key is None:
            transport.abort()
            return  # refused at accept: uvicorn never sees it
        self.ticket = _Ticket(guard, key, transport, self.loop, delay)
        self.turns = getattr(self.config, "turns", None)
        self.turn_senders: deque[bytes] = deque()
        super().connection_made(transport)
        self.ticket.arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ticket is None:
            return
        self.ticket.release()
        if self.turns is not None:
            self.turns.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.turns is None:
            super().data_received(data)
            return
        # No keep-alive timeout while the request waits its turn (uvicorn cancels it when
        # it parses).
        self._unset_keepalive_if_required()  # type: ignore[attr-defined]
        self.turns.offer(self, data)

    def parse(self, data: bytes) -> None:
        """uvicorn's own reading of ``data`` (:class:`web.turns.Turns` calls it in turn)."""
        super().data_received(data)

    def hold_reading(self, held: bool) -> None:
        if held:
            self.flow.pause_reading()
        else:
            self.flow.resume_reading()

    def _answered(self) -> None:
        if self.turns is not None:
            self.turns.answered(self)

    def _hand_over(self) -> None:
        """After a websocket upgrade: the socket's protocol now holds the connection's
        place, and releases it when it closes."""
        ticket, self.ticket = self.ticket, None
        if ticket is None:
            return
        if self.turns is not None:
            self.turns.closed(self)
        ticket.disarm()
        protocol = self.transport.get_protocol()
        if isinstance(protocol, GuardedFrames) and protocol.ticket is None:
            protocol.ticket = ticket
        else:
            ticket.release()


class GuardedH11(_Guarded, H11Protocol):
    """uvicorn's h11 protocol, admitted by the guard, with a deadline on each request head."""

    def handle_events(self) -> None:
        super().handle_events()
        if self.ticket is not None and self.conn.their_state is not h11.IDLE:
            self.ticket.disarm()  # a request head arrived (or the connection is done)

    def on_response_complete(self) -> None:
        # Armed first: the next cycle's handle_events disarms it if a head is buffered.
        if self.ticket is not None and not self.transport.is_closing():
            self.ticket.arm()
        self._answered()
        super().on_response_complete()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        super().handle_websocket_upgrade(event)
        self._hand_over()


if HttpToolsProtocol is not None:

    class GuardedHttpTools(_Guarded, HttpToolsProtocol):
        """uvicorn's httptools protocol, admitted by the guard, with a deadline on each
        request head."""

        def on_headers_complete(self) -> None:
            if self.ticket is not None:
                self.ticket.disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            # A pipelined request's head has already arrived: no deadline for it.
            waiting = bool(self.pipeline)
            self._answered()
            super().on_response_complete()
            if self.ticket is not None and not waiting and not self.transport.is_closing():
                self.ticket.arm()

        def handle_websocket_upgrade(self) -> None:
            super().handle_websocket_upgrade()
            self._hand_over()

else:  # pragma: no cover - httptools is a dependency
    GuardedHttpTools = None  # type: ignore[assignment, misc]


class GuardedFrames(FramesProtocol):
    """The websocket protocol, releasing its connection's place in the guard when it closes."""

    ticket: _Ticket | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ticket is not None:
            self.ticket.release()
        super().connection_lost(exc)


def http_protocol() -> type[asyncio.Protocol]:
    """What uvicorn's ``http="auto"`` picks (httptools, else h11), guarded."""
    return GuardedHttpTools if GuardedHttpTools is not None else GuardedH11


@dataclass(frozen=True)
class ConnectionPlan:
    """What a process may hold: connections in all and per address, websockets (0 = no cap)."""

    per_process: int
    per_address: int
    sockets_per_process: int
    open_files: int


def plan_connections(sockets_per_process: int, connections_per_address: int) -> ConnectionPlan:
    """Raise the soft open-files limit (up to the hard one) to what ``sockets_per_process``
    websockets and their page's requests need, and size the caps to the limit it got: all
    connections to it minus :data:`RESERVED_FDS`, one address to half of that. A cap cut
    down by the limit is said in one log line."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if not sockets_per_process else sockets_per_process + HTTP_ROOM + RESERVED_FDS
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, wanted, e)
        else:
            log.info("open-files limit raised from %d to %d", soft, wanted)
            soft = wanted
    room = max(1, soft - RESERVED_FDS) if soft != resource.RLIM_INFINITY else 0
    per_address = connections_per_address
    sockets = sockets_per_process
    if room:
        share = max(1, room // 2)
        if per_address and per_address > share:
            per_address = share
        sockets = min(sockets, room)
        if per_address != connections_per_address or sockets != sockets_per_process:
            log.warning(
                "open-files limit %d (hard %d): at most %d connections, %d per client "
                "address, %d websockets (configured: %s per address, %s websockets); "
                "raise the limit (ulimit -n, LimitNOFILE=) for more",
                soft,
                hard,
                room,
                per_address,
                sockets,
                connections_per_address or "no cap",
                sockets_per_process or "no cap",
            )
    return ConnectionPlan(room, per_address, sockets, soft)
