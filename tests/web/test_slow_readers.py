"""A slow reader's greeting: a long replay is written as fast as the socket takes it, not
counted against the socket as falling behind (the hub's own frames wait meanwhile).

The client's receive buffer is made tiny (SO_RCVBUF before connecting), so what the server
writes piles up in its transport, as it would to a phone on a poor link."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

from tests.web.conftest import Served, of_type, recv, recv_until, submit, wait_completed

pytestmark = pytest.mark.usefixtures("module_worker")

SCORES = 150


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"guess_rate": 0, "lane_cap": 0}


def _tiny_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


@pytest.mark.slow
async def test_a_long_replay_to_a_slow_reader_is_not_an_eviction(served: Served) -> None:
    player = await served.new_player("Slow")
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    async with connect(served.ws_url(player["token"])) as ws:
        await recv(ws)
        first = await submit(served, player["token"], rid, [pal[0]] * 4)
        seen = (await recv_until(ws, of_type("score", job_id=first)))["event_id"]
    jobs = [
        await submit(served, player["token"], rid, [pal[i % 8], pal[1], pal[2], pal[3]])
        for i in range(SCORES)
    ]
    for job in jobs:
        await wait_completed(served, player["token"], job)
    join = served.hub.join

    def join_small(player_id: str, sink: Any, address: str = "") -> Any:
        # The server's side of the socket too: a small send buffer, as on a congested link.
        sink.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
        )
        return join(player_id, sink, address)

    served.hub.join = join_small  # type: ignore[method-assign]
    served.hub.outbox_limit = 4 * 1024  # far less than the replay (~50 KB)
    url = served.ws_url(player["token"], after=seen)
    async with connect(url, sock=_tiny_socket(served.port), max_queue=1) as slow:
        got: set[str] = set()
        async with asyncio.timeout(20):
            while len(got) < SCORES:
                message = orjson.loads(await slow.recv())
                assert message["type"] != "gap"
                if message["type"] == "score":
                    got.add(message["job_id"])
                await asyncio.sleep(0.002)  # a slow reader
    assert got == set(jobs)
    assert "codemojex_sockets_evicted_total 0.0" in (await served.http.get("/metrics")).text
