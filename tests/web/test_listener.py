"""web.listener: a listening socket's whole queue is taken in one turn, under uvloop as the
web process runs it, where uvloop's own server takes one connection a turn when busy."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import pytest
import uvloop

from web.listener import BatchListener

CLIENTS = 300
WORK_S = 0.001


class Recorder(asyncio.Protocol):
    """Records each connection made and each request read; a request costs WORK_S."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        until = time.perf_counter() + WORK_S
        while time.perf_counter() < until:
            pass
        self.events.append("data")


def _clients(port: int, ready: threading.Event, socks: list[socket.socket]) -> None:
    for _ in range(CLIENTS):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"x")
        socks.append(s)
    ready.set()


async def _served(
    serve: Callable[[asyncio.AbstractEventLoop, socket.socket, list[str]], object],
) -> list[str]:
    """The events of CLIENTS connections that queued while the loop was blocked."""
    loop = asyncio.get_running_loop()
    events: list[str] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = serve(loop, sock, events)
    socks: list[socket.socket] = []
    ready = threading.Event()
    threading.Thread(target=_clients, args=(port, ready, socks), daemon=True).start()
    assert ready.wait(10)  # the loop is blocked here: every connection waits in the queue
    try:
        async with asyncio.timeout(20):
            while events.count("data") < CLIENTS:
                await asyncio.sleep(0.005)
    finally:
        server.close()  # type: ignore[attr-defined]
        for s in socks:
            s.close()
    return events


def _batch(loop: asyncio.AbstractEventLoop, sock: socket.socket, events: list[str]) -> object:
    return BatchListener(loop, sock, lambda: Recorder(events), backlog=1024, batch=512, own=True)


def test_a_queue_of_connections_is_made_before_their_requests_are_served() -> None:
    events = uvloop.run(_served(_batch))
    # A queue within the batch is taken in one turn: every connection in it is made before
    # a tenth of the requests is served (uvloop's own server, in the same setting, makes
    # one a request served: 16 in the first 30).
    first = events.index("data")
    assert events[: first + CLIENTS // 10].count("made") == CLIENTS, events[: first + 40]


@pytest.mark.parametrize("batch", [1, 8])
def test_the_batch_bounds_the_accepts_per_turn(batch: int) -> None:
    async def run() -> list[int]:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        listener = BatchListener(loop, sock, asyncio.Protocol, backlog=64, batch=batch, own=True)
        port = sock.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        seen = []
        for _ in range(6):
            await asyncio.sleep(0)
            seen.append(listener.accepted)
        listener.close()
        for c in clients:
            c.close()
        return seen

    seen = uvloop.run(run())
    steps = [b - a for a, b in zip([0, *seen], seen, strict=False)]
    assert max(steps) <= batch
    assert seen[-1] > 0


def test_a_closed_listener_refuses_new_connections() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        listener = BatchListener(loop, sock, asyncio.Protocol, backlog=8, own=True)
        listener.close()
        await listener.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)

    uvloop.run(run())
