"""Round rotation at the edge: 2-second rounds, rotated by a real ScoreWorker process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from websockets.asyncio.client import connect

from tests.web.conftest import Served, assert_error, bearer, recv_until, secret_of

pytestmark = pytest.mark.usefixtures("module_worker")


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"round_seconds": 2}


async def _until_closed(s: Served, round_id: str) -> dict[str, Any]:
    async with asyncio.timeout(6):
        while True:
            resp = await s.http.get(f"/api/rounds/{round_id}")
            assert resp.status_code == 200
            if resp.json()["state"] == "closed":
                return dict(resp.json())
            await asyncio.sleep(0.05)


async def test_a_guess_for_a_closed_round_is_409(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    await _until_closed(served, rnd["round_id"])
    resp = await served.http.post(
        "/api/guesses",
        json={"round_id": rnd["round_id"], "guess": rnd["palette"][:4]},
        headers=bearer(player["token"]),
    )
    assert_error(resp, 409, "round_closed")


async def test_the_socket_announces_the_close_then_the_next_round(served: Served) -> None:
    player = await served.new_player()
    async with connect(served.ws_url(player["token"])) as ws:
        first = await recv_until(ws, lambda m: m["type"] == "round")
        closed = await recv_until(
            ws, lambda m: m["type"] == "round" and m["state"] == "closed", timeout=6
        )
        opened = await recv_until(ws, lambda m: m["type"] == "round", timeout=3)
    # The round the socket was greeted with is the one that closes, and its successor opens
    # at that very instant (docs/contract.md §1: opens_at = previous closes_at).
    assert closed["round_id"] == first["round_id"]
    assert opened["opens_at"] == closed["closes_at"]
    assert len(closed["secret"]) == 4 and set(closed["secret"]) <= set(first["palette"])
    assert opened["state"] == "open" and "secret" not in opened
    assert opened["round_id"] != closed["round_id"]
    assert opened["opens_at"] == closed["closes_at"]


async def test_a_closed_round_shows_its_secret_and_solvers(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    player = await served.new_player("Quick")
    rnd = await served.current_round()
    secret = await secret_of(valkey, rnd["round_id"])
    resp = await served.http.post(
        "/api/guesses",
        json={"round_id": rnd["round_id"], "guess": secret},
        headers=bearer(player["token"]),
    )
    if resp.status_code == 409:  # the round closed under us; take the next one
        rnd = await served.current_round()
        secret = await secret_of(valkey, rnd["round_id"])
        resp = await served.http.post(
            "/api/guesses",
            json={"round_id": rnd["round_id"], "guess": secret},
            headers=bearer(player["token"]),
        )
    assert resp.status_code == 202, resp.text
    closed = await _until_closed(served, rnd["round_id"])
    assert closed["secret"] == secret
    async with asyncio.timeout(5):  # the score may land just after the close
        while not closed["solvers"]:
            await asyncio.sleep(0.05)
            closed = (await served.http.get(f"/api/rounds/{rnd['round_id']}")).json()
    assert closed["solvers"] == [{"player_id": player["player_id"], "name": "Quick", "seq": 0}]
    board = (
        await served.http.get("/api/leaderboard", params={"round_id": rnd["round_id"]})
    ).json()["players"]
    assert board[0]["player_id"] == player["player_id"] and board[0]["points"] == 110
