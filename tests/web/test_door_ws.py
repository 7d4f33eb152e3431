"""A socket's guess frames go through the same door as ``POST /api/guesses`` (web/door/,
docs/contract.md §4 Overload): weighed, let in lightest first, shed with an ``overloaded`` error
frame and ``retry_after`` when the door is full, and answered without a queue when the
bucket mirror already refuses the player. Without it a masher's socket was a way around
the door's bound.

Each test runs its own uvicorn (the app in this process) on the module's private Valkey.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from harness.helpers import slow_request, sql_write_locked
from tests.web.conftest import of_type, recv_until
from tests.web.test_door import serve
from web.door.gate import MIN_REFUSAL_S

pytestmark = pytest.mark.timeout(60)

GUESS = ["🍎", "🍌", "🍒", "🍇"]


async def _ws_guess(ws: ClientConnection, round_id: str, client_id: str) -> dict[str, Any]:
    await ws.send(
        orjson.dumps(
            {"type": "guess", "round_id": round_id, "guess": GUESS, "client_id": client_id}
        ).decode()
    )
    return await recv_until(
        ws, lambda m: m.get("type") in ("accepted", "error") and m.get("client_id") == client_id
    )


async def test_a_socket_guess_is_shed_overloaded_when_the_door_is_full(configure: Any) -> None:
    # One slot, a wait of 0.2 s: a slow HTTP request holds the slot, so a heavy sender's
    # socket guess waits and is shed, while a light one takes the light senders' room.
    config = configure(door_in_flight=1, door_wait_ms=200, address_in_flight=0, guess_rate=0)
    async with serve(config) as s:
        gate = s.app.state.door
        player = await s.new_player("Socket")
        round_id = (await s.current_round())["round_id"]
        with contextlib.ExitStack() as stack:
            stack.enter_context(sql_write_locked(str(config.database_url)))
            _, writer = await slow_request(s.port)
            stack.callback(writer.close)
            async with asyncio.timeout(5):
                while gate.working < 1:
                    await asyncio.sleep(0.01)
            async with connect(s.ws_url(player["token"])) as ws:
                await recv_until(ws, of_type("leaderboard"))
                # A token the door has not seen weighs as much as the light threshold and
                # a bit: not known to be light, so it waits for the bound, which is full.
                began = time.monotonic()
                shed = await _ws_guess(ws, round_id, "first")
                took = time.monotonic() - began
                assert shed == {
                    "type": "error",
                    "client_id": "first",
                    "error": "overloaded",
                    "detail": shed["detail"],
                    "retry_after": 1,
                }, shed
                assert "busy" in shed["detail"]
                # Held for the refusal's minimum: resending at once gains a client nothing.
                assert took >= MIN_REFUSAL_S - 0.05, took
                assert gate.counts["shed_wait"] == 1 and gate.counts["queued"] == 1
                # Now the door knows this player at an honest pace: light, it is served
                # beside the held slot (light senders may hold twice the bound).
                assert gate.working == 1
                accepted = await _ws_guess(ws, round_id, "second")
                assert accepted["type"] == "accepted" and accepted["seq"] == 0, accepted
        async with asyncio.timeout(10):
            while gate.working or gate.tokens_at_door or gate.at_door:
                await asyncio.sleep(0.01)


async def test_a_socket_guess_the_mirror_refuses_skips_the_queue(configure: Any) -> None:
    config = configure(guess_rate=0.5, guess_burst=1)
    async with serve(config) as s:
        gate = s.app.state.door
        player = await s.new_player("Fast")
        round_id = (await s.current_round())["round_id"]
        async with connect(s.ws_url(player["token"])) as ws:
            await recv_until(ws, of_type("leaderboard"))
            assert (await _ws_guess(ws, round_id, "a"))["type"] == "accepted"
            admitted = gate.counts["admitted"]
            refused = await _ws_guess(ws, round_id, "b")
            assert refused["error"] == "rate_limited" and refused["retry_after"] >= 1, refused
        # Known without Valkey: around the queue, no slot taken, the 429's own answer.
        assert gate.counts["bypassed"] == 1
        assert gate.counts["admitted"] == admitted
        assert s.app.state.services.game.guesses.local_refusals == 1
