"""A request counts against the door only once its body has arrived (docs/contract.md §4
Overload): bodies that never come hold their own connections, not the door's slots, and
are answered ``408 request_timeout`` at :data:`web.door.body.BODY_TIMEOUT_S`.

The attacker is a raw socket from 127.0.0.2 that declares a body and sends none; the
honest players read and guess from 127.0.0.1, on the real app under a real uvicorn.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.web.conftest import bearer
from tests.web.test_door import GUESS, serve
from web.door.body import BODY_TIMEOUT_S

pytestmark = pytest.mark.timeout(60)

ATTACKER = "127.0.0.2"


async def _stalled(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``POST /api/players`` that declares 40 bytes of body and sends none, no token."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
    writer.write(
        b"POST /api/players HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 40\r\n\r\n"
    )
    await writer.drain()
    return reader, writer


async def test_bodies_that_never_arrive_hold_no_slot_and_are_408(configure: Any) -> None:
    # Two slots (four for light senders): eight stalled requests filled them all for the
    # request's whole 5 s deadline, and every honest request waited and was shed.
    config = configure(door_in_flight=2, door_wait_ms=200, address_in_flight=0, player_rate=0)
    async with serve(config) as s:
        gate = s.app.state.door
        players = [await s.new_player(f"Honest{i}") for i in range(4)]
        round_id = (await s.current_round())["round_id"]
        stalled = [await _stalled(s.port) for _ in range(8)]
        try:
            await asyncio.sleep(0.3)  # the server has read every stalled request's head

            async def honest(token: str) -> list[int]:
                read = await s.http.get(
                    "/api/guesses", params={"round_id": round_id}, headers=bearer(token)
                )
                guess = await s.http.post(
                    "/api/guesses",
                    json={"round_id": round_id, "guess": GUESS},
                    headers=bearer(token),
                )
                return [read.status_code, guess.status_code]

            answers = await asyncio.gather(*(honest(p["token"]) for p in players))
            assert answers == [[200, 202]] * len(players), answers
            assert gate.working == 0 and gate.waiting == 0 and ATTACKER not in gate.at_door
            # The stalled requests are answered 408 at the body's deadline, and closed.
            for reader, _ in stalled:
                async with asyncio.timeout(BODY_TIMEOUT_S + 3):
                    raw = await reader.read()  # to EOF: the server closes the connection
                head, _, body = raw.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 408"), raw[:200]
                assert b'"error":"request_timeout"' in body, raw[:400]
            assert gate.counts["body_timeout"] == len(stalled)
        finally:
            for _, writer in stalled:
                writer.close()


async def test_a_body_that_arrives_slowly_but_in_time_is_served(configure: Any) -> None:
    config = configure(player_rate=0)
    async with serve(config) as s:
        body = b'{"name": "Slowpoke"}'
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        try:
            writer.write(
                b"POST /api/players HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body[:5]
            )
            await writer.drain()
            await asyncio.sleep(BODY_TIMEOUT_S / 4)
            writer.write(body[5:])
            await writer.drain()
            async with asyncio.timeout(5):
                status = await reader.readline()
            assert status.startswith(b"HTTP/1.1 201"), status
        finally:
            writer.close()


async def test_a_body_over_the_cap_is_still_413_and_a_bad_token_401(configure: Any) -> None:
    config = configure(player_rate=0)
    async with serve(config) as s:
        big = b'{"name": "' + b"x" * (17 * 1024) + b'"}'
        resp = await s.http.post("/api/players", content=big)
        assert resp.status_code == 413 and resp.json()["error"] == "body_too_large"

        async def chunks() -> Any:  # no Content-Length: the door stops reading at the cap
            for _ in range(20):
                yield b"x" * 1024

        resp = await s.http.post("/api/guesses", content=chunks(), headers=bearer("nope"))
        assert resp.status_code == 401, resp.text
        resp = await s.http.post("/api/players", content=chunks())
        assert resp.status_code == 413, resp.text
