"""Admission limits of one web process: sockets per player and in all, and how far back a
resume may ask to be replayed. Small limits here so each is reached; the defaults (5 per
player, 10,000 per process, 10,000 events) are far above what one page does."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.web.conftest import Served, of_type, recv, recv_until, submit

pytestmark = pytest.mark.usefixtures("module_worker")


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"sockets_per_player": 2, "sockets_per_process": 4, "replay_max_events": 5}


async def _closed_with(ws: ClientConnection) -> int | None:
    try:
        async with asyncio.timeout(5):
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


async def test_a_players_third_socket_is_told_to_come_back_later(served: Served) -> None:
    player = await served.new_player()
    url = served.ws_url(player["token"])
    async with connect(url) as one, connect(url) as two:
        assert (await recv(one))["type"] == "round"
        assert (await recv(two))["type"] == "round"
        async with connect(url) as three:
            assert await _closed_with(three) == 1013
    # the first two closed: room again, once the server has seen them go
    async with asyncio.timeout(5):
        while True:
            async with connect(url) as again:
                try:
                    if (await recv(again))["type"] == "round":
                        break
                except ConnectionClosed:
                    await asyncio.sleep(0.05)


async def test_the_process_cap_counts_every_players_sockets(served: Served) -> None:
    players = [await served.new_player(f"P{i}") for i in range(5)]
    async with (
        connect(served.ws_url(players[0]["token"])) as a,
        connect(served.ws_url(players[1]["token"])) as b,
        connect(served.ws_url(players[2]["token"])) as c,
        connect(served.ws_url(players[3]["token"])) as d,
    ):
        for ws in (a, b, c, d):
            assert (await recv(ws))["type"] == "round"
        async with connect(served.ws_url(players[4]["token"])) as fifth:
            assert await _closed_with(fifth) == 1013


async def test_a_resume_too_far_back_gets_a_gap_instead_of_a_long_replay(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    pal = rnd["palette"]
    seen: list[str] = []
    async with connect(served.ws_url(player["token"])) as ws:
        await recv(ws), await recv(ws)
        for i in range(8):
            job = await submit(served, player["token"], rnd["round_id"], [pal[i], *pal[:3]])
            score = await recv_until(ws, of_type("score", job_id=job))
            seen.append(score["event_id"])

    async def resume(after: str) -> list[dict[str, Any]]:
        async with connect(served.ws_url(player["token"], after=after)) as ws:
            out = []
            try:
                async with asyncio.timeout(0.8):
                    while True:
                        out.append(orjson.loads(await ws.recv()))
            except TimeoutError:
                return out

    far = await resume(seen[0])  # 7 events after it, the bound is 5
    assert [m["type"] for m in far if m["type"] in ("gap", "score")] == ["gap"]
    near = await resume(seen[4])  # 3 events after it
    assert not [m for m in near if m["type"] == "gap"]
    assert sorted(m["event_id"] for m in near if m["type"] == "score") == sorted(seen[5:])
