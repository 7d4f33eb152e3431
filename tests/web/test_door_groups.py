"""A full process makes room for a newcomer however its sockets are spread (docs/contract.md §4
Overload): over many addresses one socket each, or over many /64s of one IPv6 /48.

IPv4 clients bind distinct loopback addresses; IPv6 clients come through a trusted proxy
(the test's own 127.0.0.1) whose ``X-Forwarded-For`` names them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from codemojex.config import Config
from echomq.server import EmbeddedValkey
from tests.web.conftest import Served, make_config, recv
from tests.web.test_door import serve
from web.sockets import address_groups

pytestmark = pytest.mark.timeout(60)

FULL = 4  # the process's sockets (SOCKETS_PER_PROCESS)


@pytest.fixture
def configure(private_valkey: EmbeddedValkey, sql_url: str, tmp_path: Path) -> Any:
    def make(**changes: Any) -> Config:
        settings: dict[str, Any] = {
            "sockets_per_player": 0,
            "sockets_per_address": 0,
            "sockets_per_process": FULL,
            "player_rate": 0,
        }
        return make_config(private_valkey.url, sql_url, tmp_path, **{**settings, **changes})

    return make


async def _greeted(ws: ClientConnection) -> bool:
    try:
        return bool((await recv(ws))["type"] == "round")
    except ConnectionClosed:
        return False


async def _closed_with(ws: ClientConnection, wait_s: float = 1.5) -> int | None:
    """The close code the server sent within ``wait_s``; None: still open."""
    try:
        async with asyncio.timeout(wait_s):
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None
    except TimeoutError:
        return None


@contextlib.asynccontextmanager
async def _socket(
    s: Served, token: str, *, local: str = "127.0.0.1", forwarded: str | None = None
) -> AsyncIterator[ClientConnection]:
    headers = {"X-Forwarded-For": forwarded} if forwarded else None
    async with connect(
        s.ws_url(token), local_addr=(local, 0), additional_headers=headers, open_timeout=5
    ) as ws:
        yield ws


async def test_one_socket_from_each_of_many_addresses_does_not_keep_a_newcomer_out(
    configure: Any,
) -> None:
    async with serve(configure()) as s:
        player = await s.new_player("Many")
        async with contextlib.AsyncExitStack() as stack:
            held = [
                await stack.enter_async_context(_socket(s, player["token"], local=f"127.0.0.{i}"))
                for i in range(2, 2 + FULL)
            ]
            assert all([await _greeted(ws) for ws in held])
            newcomer = await s.new_player("Newcomer")
            async with _socket(s, newcomer["token"], local="127.0.0.9") as ws:
                assert await _greeted(ws)
                codes = await asyncio.gather(*(_closed_with(h) for h in held))
                assert sorted(codes, key=str) == [1013, None, None, None], codes


async def test_a_customers_48_is_one_group_when_room_is_made(configure: Any) -> None:
    async with serve(configure(), forwarded_allow_ips="127.0.0.1") as s:
        crowd, honest = await s.new_player("Crowd"), await s.new_player("Honest")
        async with contextlib.AsyncExitStack() as stack:
            first = await stack.enter_async_context(
                _socket(s, honest["token"], forwarded="2001:db8:aaaa::1")
            )
            assert await _greeted(first)
            # One customer's /48, a socket from each of three of its /64s.
            spread = [
                await stack.enter_async_context(
                    _socket(s, crowd["token"], forwarded=f"2001:db8:1:{i:x}00::1")
                )
                for i in range(1, FULL)
            ]
            assert all([await _greeted(ws) for ws in spread])
            newcomer = await s.new_player("Newcomer")
            async with _socket(s, newcomer["token"], forwarded="2001:db8:bbbb::1") as ws:
                assert await _greeted(ws)
                codes = await asyncio.gather(*(_closed_with(h) for h in spread))
                assert sorted(codes, key=str) == [1013, None, None], codes
                assert first.close_code is None  # the one socket of its own /48 stays
                # One more from inside the crowd's /48 takes one of the crowd's, no other.
                open_spread = [h for h, code in zip(spread, codes, strict=True) if code is None]
                async with _socket(s, crowd["token"], forwarded="2001:db8:1:f00::1") as more:
                    assert await _greeted(more)
                    again = await asyncio.gather(*(_closed_with(h) for h in open_spread))
                    assert sorted(again, key=str) == [1013, None], again
                    assert first.close_code is None and ws.close_code is None


def test_an_ipv6_64_is_grouped_by_its_56_and_48() -> None:
    assert address_groups("2001:db8:1:2::/64") == (
        "2001:db8:1::/48",
        "2001:db8:1::/56",
        "2001:db8:1:2::/64",
    )
    assert address_groups("203.0.113.7") == ("203.0.113.7",)
