"""Paths outside ``/api/`` are under the per-address bound too (docs/contract.md §4
Overload): health checks and socket handshakes count against their address's requests at
the door, a token that failed lately is refused without a lookup, and a socket's frames
that are no guess (pings, malformed ones) have a rate, past which it is closed 1008.

``CLIENT PAUSE`` on the module's Valkey holds health checks in flight (each waits on its
PING), as a slow backend would; SQL statements are counted on the app's own engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from typing import Any

import httpx
import pytest
import redis.asyncio
from sqlalchemy import event
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from echomq.server import EmbeddedValkey
from tests.web.conftest import bearer, recv, recv_until
from tests.web.test_door import serve
from web.ws import FRAME_BURST

pytestmark = pytest.mark.timeout(60)

ADDRESS = "127.0.0.2"
PAUSE_MS = 1500


async def _pause(url: str) -> None:
    conn = redis.asyncio.Redis.from_url(url)
    try:
        await conn.client_pause(PAUSE_MS, all=True)
    finally:
        await conn.aclose()


async def _held(gate: Any, address: str, count: int) -> None:
    """Until ``address`` holds ``count`` requests at the door, for a second at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1):
            while gate.at_door.get(address, 0) < count:
                await asyncio.sleep(0.01)


async def test_health_checks_and_handshakes_count_against_their_address(
    configure: Any, private_valkey: EmbeddedValkey
) -> None:
    config = configure(address_in_flight=3)
    async with serve(config) as s:
        gate = s.app.state.door
        token = (await s.new_player("Hs"))["token"]
        transport = httpx.AsyncHTTPTransport(local_address=ADDRESS)
        async with httpx.AsyncClient(base_url=s.base, transport=transport, timeout=10) as one:
            await _pause(private_valkey.url)
            checks = [asyncio.create_task(one.get("/healthz")) for _ in range(10)]
            await _held(gate, ADDRESS, 3)
            # The address's bound is full: a socket handshake from it is told to come back.
            async with connect(s.ws_url(token), local_addr=(ADDRESS, 0), open_timeout=5) as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    await recv(ws, timeout=PAUSE_MS / 1000 + 3)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
            answers = Counter(r.status_code for r in await asyncio.gather(*checks))
        # Three were worked on; the other seven were refused at once, 503 overloaded.
        assert answers == Counter({200: 3, 503: 7}), answers
        assert "127.0.0.1" not in gate.at_door and ADDRESS not in gate.at_door
        # Another address was never held back, nor is this one now.
        assert (await s.http.get("/healthz")).status_code == 200


async def test_a_token_that_failed_lately_costs_no_lookup(configure: Any) -> None:
    async with serve(configure()) as s:
        engine = s.app.state.services.game.engine.sync_engine
        lookups: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if "WHERE players.token_hash" in statement:
                lookups.append(statement)

        event.listen(engine, "before_cursor_execute", count)
        try:
            bad = secrets.token_urlsafe(24)
            round_id = (await s.current_round())["round_id"]
            for _ in range(10):
                resp = await s.http.get(
                    "/api/guesses", params={"round_id": round_id}, headers=bearer(bad)
                )
                assert resp.status_code == 401
            for _ in range(10):
                with pytest.raises(InvalidStatus) as refused:
                    async with connect(s.ws_url(bad), open_timeout=5):
                        pass
                assert refused.value.response.status_code == 403
            assert len(lookups) == 1, lookups
            # A real token still works, and is looked up once.
            good = (await s.new_player("Good"))["token"]
            async with connect(s.ws_url(good), open_timeout=5) as ws:
                assert (await recv(ws))["type"] == "round"
            assert len(lookups) == 2, lookups
        finally:
            event.remove(engine, "before_cursor_execute", count)


async def test_a_socket_sending_pings_past_its_rate_is_closed_1008(configure: Any) -> None:
    async with serve(configure()) as s:
        token = (await s.new_player("Pinger"))["token"]
        async with connect(s.ws_url(token), open_timeout=5) as ws:
            await recv_until(ws, lambda m: m.get("type") == "leaderboard")
            sent = int(FRAME_BURST) * 3
            for _ in range(sent):
                await ws.send('{"type":"ping"}')
            pongs = 0
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    if (await recv(ws))["type"] == "pong":
                        pongs += 1
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert pongs < sent, pongs
        # So does one sending malformed frames; an honest socket's few pings are answered.
        async with connect(s.ws_url(token), open_timeout=5) as ws:
            await recv_until(ws, lambda m: m.get("type") == "leaderboard")
            for _ in range(3):
                await ws.send('{"type":"ping"}')
                assert (await recv_until(ws, lambda m: m.get("type") == "pong"))["type"]
            for _ in range(sent):
                await ws.send("not json")
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await recv(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
