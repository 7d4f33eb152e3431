"""web.turns: what a turn of the loop reads is parsed light senders first, heavy ones a few
a turn, each connection's chunks in order; and through the production server, an honest
request sent after a gang's is answered before most of the gang's."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

import pytest

from harness.helpers import free_port
from web.server import Server, server_config
from web.turns import LIGHT_IN_FLIGHT, Turns, token_of


class Conn:
    """A connection as Turns sees it: what it parsed, in order, and whether it reads."""

    def __init__(self, log: list[bytes]) -> None:
        self.turn_backlog: deque[tuple[bytes, bytes | None]] | None = None
        self.turn_senders: deque[bytes] = deque()
        self.turn_closed = False
        self.reading = True
        self.log = log

    def parse(self, data: bytes) -> None:
        self.log.append(data)

    def hold_reading(self, held: bool) -> None:
        self.reading = not held


def head(token: str, n: int = 0) -> bytes:
    return f"POST /api/guesses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n{n}".encode()


def test_token_of_reads_the_bearer_header_in_any_case() -> None:
    assert token_of(b"GET / HTTP/1.1\r\nauthorization: bearer abc.def\r\n\r\n") == b"abc.def"
    assert token_of(b"GET / HTTP/1.1\r\nAUTHORIZATION:Bearer\tT1\r\n\r\n") == b"T1"
    assert token_of(b"GET /ws?token=abc HTTP/1.1\r\nHost: x\r\n\r\n") is None
    assert token_of(b"GET / HTTP/1.1\r\nAuthorization: Basic Zm9v\r\n\r\n") is None


async def _turns(turns: Turns, n: int = 1) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_gang_waits_and_a_light_sender_is_parsed_in_its_turn() -> None:
    turns = Turns(heavy_per_turn=4, heavy_per_light=0)
    turns.seen[b"honest"] = None
    log: list[bytes] = []
    gang = [Conn(log) for _ in range(12)]
    for i, conn in enumerate(gang):
        turns.offer(conn, head("masher", i))
    honest = Conn(log)
    turns.offer(honest, head("honest"))
    await _turns(turns)
    # The honest request first, then four of the gang's; the rest wait, not reading.
    assert log[0] == head("honest")
    assert log[1:] == [head("masher", i) for i in range(4)]
    assert sum(not c.reading for c in gang) == 8
    await _turns(turns, 2)
    assert len(log) == 1 + 12
    assert all(c.reading for c in gang)
    assert turns.deferred == 12


async def test_light_senders_are_parsed_in_arrival_order_without_waiting() -> None:
    turns = Turns(heavy_per_turn=1, heavy_per_light=0)
    turns.seen.update({b"p1": None, b"p3": None})
    log: list[bytes] = []
    conns = [Conn(log) for _ in range(5)]
    for i, conn in enumerate(conns):
        turns.offer(conn, head(f"p{i}") if i % 2 else b"GET /api/round HTTP/1.1\r\n\r\n")
    await _turns(turns)
    assert len(log) == 5
    assert turns.deferred == 0


async def test_a_sender_is_heavy_only_past_its_light_count_until_answered() -> None:
    turns = Turns(heavy_per_turn=0, heavy_per_light=0)
    turns.seen[b"p"] = None
    log: list[bytes] = []
    conns = [Conn(log) for _ in range(LIGHT_IN_FLIGHT)]
    for conn in conns:
        turns.offer(conn, head("p"))
    await _turns(turns)
    assert len(log) == LIGHT_IN_FLIGHT  # within the light count: parsed
    extra = Conn(log)
    turns.offer(extra, head("p"))
    await _turns(turns)
    assert len(log) == LIGHT_IN_FLIGHT  # one more unanswered: it waits
    for conn in conns:
        turns.answered(conn)
    assert turns.held == {b"p": 1}
    turns.closed(extra)
    assert turns.held == {}


async def test_a_token_not_answered_yet_waits_first_among_the_heavy_until_answered() -> None:
    turns = Turns(heavy_per_turn=1, heavy_per_light=0)
    log: list[bytes] = []
    gang = [Conn(log) for _ in range(3)]
    for conn in gang:
        turns.offer(conn, head("masher"))
    newcomer = Conn(log)
    turns.offer(newcomer, head("new"))
    await _turns(turns)
    assert log == [head("new")]  # not light (never answered), but the lightest waiting
    turns.answered(newcomer)
    assert b"new" in turns.seen
    again = Conn(log)
    turns.offer(again, head("new", 1))
    await _turns(turns)
    assert log[1] == head("new", 1)  # answered once: light, parsed before the gang's


async def test_each_light_request_in_a_turn_lets_more_heavy_ones_through() -> None:
    """When most senders are heavy only because the process answers slowly, a fixed few a
    turn would break its batches: each light one parsed lets ``heavy_per_light`` more in."""
    turns = Turns(heavy_per_turn=2, heavy_per_light=3)
    log: list[bytes] = []
    for i in range(20):
        turns.offer(Conn(log), head("busy", i))
    for name in ("a", "b"):
        turns.seen[name.encode()] = None
        turns.offer(Conn(log), head(name))
    await _turns(turns)
    assert len(log) == 2 + 2 + 3 * 2  # the two light, then 2 + 3 per light of the heavy


async def test_a_connections_chunks_keep_their_order_behind_a_waiting_one() -> None:
    turns = Turns(heavy_per_turn=1, heavy_per_light=0)
    log: list[bytes] = []
    first = [Conn(log) for _ in range(3)]
    for conn in first:
        turns.offer(conn, head("m"))
    await _turns(turns)
    # The second and third wait; a body chunk read on the third waits behind its head.
    waiting = [c for c in first if c.turn_backlog is not None]
    assert len(waiting) == 2
    turns.offer(waiting[-1], b"the rest of the body")
    await _turns(turns, 3)
    assert log[-2:] == [head("m"), b"the rest of the body"]


async def test_a_connection_closed_while_it_waits_is_never_parsed() -> None:
    turns = Turns(heavy_per_turn=1, heavy_per_light=0)
    log: list[bytes] = []
    conns = [Conn(log) for _ in range(4)]
    for conn in conns:
        turns.offer(conn, head("m"))
    await _turns(turns)
    gone = [c for c in conns if c.turn_backlog is not None]
    for conn in gone:
        turns.closed(conn)
    await _turns(turns, 4)
    assert len(log) == 1
    assert turns.held == {b"m": 1}


# Through the production server: an app that holds its loop WORK_S on every request (a
# sleep, not a spin, so the client in the test's own thread keeps the GIL meanwhile).
WORK_S = 0.002
GANG = 128


async def _costly(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    time.sleep(WORK_S)  # noqa: ASYNC251 - the point: the loop is held, as by real work
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _ask(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], token: str) -> None:
    _, writer = conn
    writer.write(f"GET /x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()


@pytest.mark.parametrize("light_first", [True, False])
async def test_an_honest_request_after_a_gangs_is_answered_before_most_of_it(
    light_first: bool,
) -> None:
    port = free_port()
    config = server_config(_costly, port=port, log_level="warning", graceful_shutdown_s=1)
    if not light_first:
        config.turns = None  # the same server parsing in arrival order: the premise
    server = Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
            conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(GANG + 1)]
        for conn in conns[:GANG]:
            await _ask(conn, "masher")
        await asyncio.sleep(0.02)  # the gang's requests are read before the honest one
        await _ask(conns[GANG], "honest")
        order: list[int] = []

        async def answer(i: int) -> None:
            await conns[i][0].readuntil(b"ok")
            order.append(i)

        async with asyncio.timeout(20):
            await asyncio.gather(*(answer(i) for i in range(GANG + 1)))
        place = order.index(GANG)
        if light_first:
            assert place < GANG // 2, order
        else:
            assert place > GANG // 2, order
    finally:
        for _, writer in conns:
            writer.close()
        server.should_exit = True
        thread.join(10)
