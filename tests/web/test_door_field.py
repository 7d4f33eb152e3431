"""The door's idea of an honest pace comes from authenticated players only (docs/contract.md §4
Overload): made-up bearer tokens, however many, do not pull the light threshold down and
so do not make honest players heavy.

Two players read at 8 requests a second each while another address sends 16 requests a
second, each with a fresh random token, to the real app under a real uvicorn.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import httpx
import pytest

from tests.web.conftest import bearer
from tests.web.test_door import serve
from web.door.gate import LIGHT_RATE

pytestmark = pytest.mark.timeout(60)

SECONDS = 2.5


async def _paced(per_s: float, send: Any) -> list[int]:
    statuses = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    n = 0
    while loop.time() - start < SECONDS:
        statuses.append(await send())
        n += 1
        await asyncio.sleep(max(0.0, start + n / per_s - loop.time()))
    return statuses


async def test_random_bearer_tokens_do_not_move_the_light_threshold(configure: Any) -> None:
    async with serve(configure(player_rate=0)) as s:
        gate = s.app.state.door
        round_id = (await s.current_round())["round_id"]
        honest = [(await s.new_player(f"Honest{i}"))["token"] for i in range(2)]

        def reader(token: str) -> Any:
            async def send() -> int:
                resp = await s.http.get(
                    "/api/guesses", params={"round_id": round_id}, headers=bearer(token)
                )
                return resp.status_code

            return send

        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=s.base, transport=transport) as other:

            async def forger() -> int:
                resp = await other.get(
                    "/api/guesses",
                    params={"round_id": round_id},
                    headers=bearer(secrets.token_urlsafe(24)),
                )
                return resp.status_code

            answers = await asyncio.gather(
                *(_paced(8, reader(t)) for t in honest), _paced(16, forger)
            )
        assert set(answers[0]) == set(answers[1]) == {200}
        assert set(answers[2]) == {401} and len(answers[2]) >= 16 * SECONDS * 0.8
        # The players at 8 a second set the pace (three times theirs, up to the game's
        # rate); the forged tokens, 16 a second, never counted.
        assert gate.light_now == LIGHT_RATE, gate.light_now
