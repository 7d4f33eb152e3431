"""Per-address limits on sockets and resumes (docs/contract.md §4 "Overload"): one client address
cannot take a process's sockets from another, and reconnecting in a loop with ``after=``
costs the looping player and address their replays, not everyone's time.

Clients bind distinct loopback addresses (127.0.0.x), which the server sees as distinct
peers, as it would distinct hosts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.web.conftest import (
    Served,
    of_type,
    recv,
    recv_until,
    serve,
    submit,
    wait_completed,
)

pytestmark = pytest.mark.usefixtures("module_worker")

A, B, C = "127.0.0.1", "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {
        "sockets_per_player": 0,
        "sockets_per_process": 4,
        "sockets_per_address": 0,
        "replay_max_events": 6,
        "replays_per_minute": 3,
        "player_rate": 0,
    }


def _from(served: Served, token: str, host: str, after: str | None = None) -> Any:
    return connect(served.ws_url(token, after=after), local_addr=(host, 0))


async def _greeted(ws: ClientConnection) -> bool:
    """True once the socket got its round; False when it was closed first."""
    try:
        return (await recv(ws))["type"] == "round"
    except ConnectionClosed:
        return False


async def _closed_with(ws: ClientConnection) -> int | None:
    try:
        async with asyncio.timeout(5):
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


async def _settled(served: Served, sockets: int) -> None:
    async with asyncio.timeout(5):
        while served.hub.sockets != sockets:
            await asyncio.sleep(0.02)


async def test_a_full_process_makes_room_for_another_address(served: Served) -> None:
    hog, guest = await served.new_player("Hog"), await served.new_player("Guest")
    hogs = [_from(served, hog["token"], A) for _ in range(4)]
    opened = [await h.__aenter__() for h in hogs]
    try:
        assert all([await _greeted(ws) for ws in opened])
        # The process is full, all of it one address's. Another address's player still
        # gets in: the hog's newest socket is closed "try again later".
        async with _from(served, guest["token"], B) as first:
            assert await _greeted(first)
            assert await _closed_with(opened[-1]) == 1013
            await _settled(served, 4)
            # A second one too (its share of 4 over 2 addresses is 2) ...
            async with _from(served, guest["token"], B) as second:
                assert await _greeted(second)
                assert await _closed_with(opened[-2]) == 1013
                await _settled(served, 4)
                # ... but not a third: past its share it displaces no one.
                async with _from(served, guest["token"], B) as third:
                    assert await _closed_with(third) == 1013
                assert not any(ws.close_code for ws in opened[:2])
    finally:
        for h in hogs:
            await h.__aexit__(None, None, None)


async def test_sockets_per_address_caps_one_address(served: Served) -> None:
    capped = served.config.with_(sockets_per_address=2, sockets_per_process=0)
    async with serve(capped) as other:
        player = await other.new_player()
        async with _from(other, player["token"], C) as one, _from(other, player["token"], C) as two:
            assert await _greeted(one) and await _greeted(two)
            async with _from(other, player["token"], C) as three:
                assert await _closed_with(three) == 1013
            async with _from(other, player["token"], A) as elsewhere:
                assert await _greeted(elsewhere)


async def _first_score_id(served: Served, player: dict[str, Any], rnd: dict[str, Any]) -> str:
    async with _from(served, player["token"], A) as ws:
        await recv(ws)
        job = await submit(served, player["token"], rnd["round_id"], [rnd["palette"][0]] * 4)
        return str((await recv_until(ws, of_type("score", job_id=job)))["event_id"])


async def _resume_types(served: Served, token: str, host: str, after: str) -> list[str]:
    async with _from(served, token, host, after=after) as ws:
        out = []
        with_timeout = asyncio.timeout(1.0)
        try:
            async with with_timeout:
                while True:
                    out.append((await recv(ws))["type"])
        except TimeoutError:
            pass
    return [t for t in out if t in ("score", "gap")]


async def test_replays_are_charged_to_the_player_across_connections(served: Served) -> None:
    player = await served.new_player("Looper")
    rnd = await served.current_round()
    seen = await _first_score_id(served, player, rnd)
    for i in range(5):  # 5 events after the resume point: within replay_max_events (6)
        job = await submit(served, player["token"], rnd["round_id"], [rnd["palette"][i + 1]] * 4)
        await wait_completed(served, player["token"], job)
    # Each resume reads the 5 events. The player may read 3 windows of replay_max_events
    # (18 events) a minute, wherever it connects from: three resumes, from three
    # addresses, are replayed; the fourth finds 3 events left, reads past them, gets a
    # gap; the fifth gets a gap without reading.
    hosts = [f"127.0.0.{10 + i}" for i in range(5)]
    got = [await _resume_types(served, player["token"], host, seen) for host in hosts]
    assert got == [["score"] * 5] * 3 + [["gap"], ["gap"]]


async def test_resumes_per_minute_are_counted_per_address(served: Served) -> None:
    players = [await served.new_player(f"R{i}") for i in range(5)]
    rnd = await served.current_round()
    points = [await _first_score_id(served, p, rnd) for p in players]
    # Nothing after each point: each resume reads nothing, but each counts. The address
    # may resume 3 times a minute; the fourth and fifth get a gap, another address not.
    got = [await _resume_types(served, p["token"], B, pt) for p, pt in zip(players, points)]
    assert got == [[], [], [], ["gap"], ["gap"]]
    assert await _resume_types(served, players[0]["token"], C, points[0]) == []
