"""New players per client address: a token bucket in Valkey, shared by every web process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.web.conftest import Served, assert_error, serve


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"player_rate": 0.5, "player_burst": 3}


async def test_new_players_beyond_the_burst_wait_for_the_bucket(served: Served) -> None:
    for i in range(3):
        assert (await served.http.post("/api/players", json={"name": f"p{i}"})).status_code == 201
    # A bad name is judged first (400 before 429) and spends nothing.
    assert_error(await served.http.post("/api/players", json={"name": ""}), 400, "invalid_body")
    # A second web process shares the bucket: it is the address that is limited.
    async with serve(served.config) as other:
        refused = await other.http.post("/api/players", json={"name": "p3"})
    body = assert_error(refused, 429, "rate_limited")
    assert "p3" not in body["detail"]
    wait_s = int(refused.headers["Retry-After"])
    assert 1 <= wait_s <= 2
    await asyncio.sleep(wait_s)
    assert (await served.http.post("/api/players", json={"name": "p3"})).status_code == 201
