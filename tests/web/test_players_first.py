"""Players first, addresses second (docs/contract.md §4 Overload; web/door/): on a real
server, honest players behind the same address as closed-loop mashers keep their guesses
while the mashers are shed; a player's request waiting at the door does not make its next
one heavier; requests without a token are still held to their address's bound, as are the
players past an honest pace behind it, who hold at most three quarters of it.

Each test but the last runs its own uvicorn (the app in this process) on the module's
private Valkey; the last drives the gate alone.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from harness.helpers import slow_request, sql_write_locked
from harness.mashers import MashTally, mash_loop
from tests.web.conftest import assert_error, bearer
from tests.web.test_door import GUESS, serve
from web.door.admit import Shed, through
from web.door.gate import LIGHT_FLOOR, Gate

pytestmark = pytest.mark.timeout(90)

MASHERS = 10
IN_FLIGHT = 8  # each masher's closed loops
HONEST = 80
LOAD_S = 5.0
HONEST_EVERY_S = 2.0  # one guess per honest player about every 2 s: well inside its pace


async def _honest_player(
    http: httpx.AsyncClient, token: str, round_id: str, until: float, seen: Counter[str]
) -> None:
    rng = random.Random(token)
    await asyncio.sleep(rng.uniform(0, HONEST_EVERY_S))
    while time.monotonic() < until:
        r = await http.post(
            "/api/guesses", json={"round_id": round_id, "guess": GUESS}, headers=bearer(token)
        )
        detail = r.json().get("detail", "") if r.status_code == 503 else ""
        seen[f"{r.status_code}{' address' if 'address' in detail else ''}"] += 1
        await asyncio.sleep(rng.uniform(0.75, 1.25) * HONEST_EVERY_S)


@pytest.mark.slow
async def test_honest_players_behind_the_mashers_address_keep_their_guesses(
    configure: Any,
) -> None:
    # No rate limit and no pending cap: the mashers are held back by the door alone. A
    # bound per address well under the mashers' 80 loops, so their address is at it.
    config = configure(guess_rate=0, lane_cap=0, address_in_flight=16)
    async with serve(config) as s:
        round_id = (await s.current_round())["round_id"]
        palette = [str(p) for p in (await s.current_round())["palette"]]
        honest = [(await s.new_player(f"Honest {i}"))["token"] for i in range(HONEST)]
        mashers = [(await s.new_player(f"Masher {i}"))["token"] for i in range(MASHERS)]
        # Everyone has played before: this process knows their tokens.
        for token in honest + mashers:
            r = await s.http.post(
                "/api/guesses", json={"round_id": round_id, "guess": GUESS}, headers=bearer(token)
            )
            assert r.status_code == 202, r.text
        until = time.monotonic() + LOAD_S
        tally = MashTally()
        seen: Counter[str] = Counter()
        limits = httpx.Limits(max_connections=HONEST, max_keepalive_connections=HONEST)
        async with httpx.AsyncClient(base_url=s.base, timeout=30, limits=limits) as http:
            await asyncio.gather(
                *(
                    mash_loop(s.port, token, round_id, palette, len(GUESS), until, tally)
                    for token in mashers
                    for _ in range(IN_FLIGHT)
                ),
                *(_honest_player(http, token, round_id, until, seen) for token in honest),
            )
        gate = s.app.state.door
        async with asyncio.timeout(10):
            while gate.working or gate.waiting or gate.at_door or gate.tokens_at_door:
                await asyncio.sleep(0.05)
    sent = sum(seen.values())
    assert sent >= 150, seen
    # The mashers, from the same address, were shed ...
    assert tally.statuses[503] > 0 and tally.statuses[202] > 0, tally.statuses
    assert set(tally.statuses) <= {202, 503}, tally.statuses
    # ... and the honest players beside them were not: >= 99 % accepted.
    assert seen["202"] >= 0.99 * sent, seen
    assert not gate.fast_at_door


async def test_a_players_request_waiting_at_the_door_does_not_make_its_next_heavier(
    configure: Any,
) -> None:
    # One slot (two for light requests), shed after 0.3 s, a light request after 1.2 s.
    config = configure(door_in_flight=1, door_wait_ms=300)
    async with serve(config) as s:
        gate = s.app.state.door
        round_id = (await s.current_round())["round_id"]
        # A field of players at a slow pace: the light threshold is at its floor. Their
        # first guesses make their tokens known here; their second ones, 2.5 s later, put
        # them in the field at ~0.6 guesses/s.
        field = [(await s.new_player(f"Field {i}"))["token"] for i in range(8)]
        player = (await s.new_player("Honest"))["token"]

        async def guess(token: str) -> None:
            r = await s.http.post(
                "/api/guesses", json={"round_id": round_id, "guess": GUESS}, headers=bearer(token)
            )
            assert r.status_code == 202, r.text

        for token in [*field, player]:
            await guess(token)
        await asyncio.sleep(2.5)
        for token in [*field, player]:
            await guess(token)
        await asyncio.sleep(1.0)  # the player's rate decays to an honest pace
        with sql_write_locked(str(config.database_url)):
            # Two sign-ups waiting for SQL hold both light slots.
            held = [await slow_request(s.port, "127.0.0.2") for _ in range(2)]
            async with asyncio.timeout(5):
                while gate.working < 2:
                    await asyncio.sleep(0.01)
            # The player's guess waits at the door; then its read, while the guess waits.
            first = asyncio.create_task(
                s.http.post(
                    "/api/guesses",
                    json={"round_id": round_id, "guess": GUESS},
                    headers=bearer(player),
                )
            )
            async with asyncio.timeout(5):
                while gate.waiting < 1:
                    await asyncio.sleep(0.005)
            second = asyncio.create_task(
                s.http.get(f"/api/guesses?round_id={round_id}", headers=bearer(player))
            )
            async with asyncio.timeout(5):
                while gate.waiting < 2:
                    await asyncio.sleep(0.005)
            assert gate.light_now == LIGHT_FLOOR
            # Past the heavy senders' wait, within a light one's: nothing was shed, since
            # its first request's wait did not make its second heavier.
            await asyncio.sleep(0.6)
            assert gate.counts["shed_wait"] == 0, gate.counts
        for _, writer in held:
            writer.close()
        answers = await asyncio.gather(first, second)
    assert [a.status_code for a in answers] == [202, 200], [a.text for a in answers]


async def test_tokenless_requests_and_fast_players_are_held_to_their_address(
    configure: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fast player's rate decays while the tokenless refusal is held: with a jittered
    # hold (up to 1.5 s) it could fall back under the light threshold before its own
    # request, which then is rightly its own. Held exactly 1 s, it is still fast.
    monkeypatch.setattr("web.door.admit.HOLD_JITTER", 0.0)
    config = configure(address_in_flight=4)
    async with serve(config) as s:
        gate = s.app.state.door
        round_id = (await s.current_round())["round_id"]
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(base_url=s.base, transport=transport, timeout=10) as same:
            honest = (await same.post("/api/players", json={"name": "Honest"})).json()["token"]
            fast = (await same.post("/api/players", json={"name": "Fast"})).json()["token"]
            assert (
                await same.post(
                    "/api/guesses",
                    json={"round_id": round_id, "guess": GUESS},
                    headers=bearer(honest),
                )
            ).status_code == 202
            # A player past an honest pace: 40 reads in about a second.
            for _ in range(40):
                r = await same.get(f"/api/guesses?round_id={round_id}", headers=bearer(fast))
                assert r.status_code == 200, r.text
            assert gate.players.rate(fast, gate.clock()) > gate.light_now
            with sql_write_locked(str(config.database_url)):
                # Its address at its bound: four sign-ups waiting for SQL.
                held = [await slow_request(s.port, "127.0.0.2") for _ in range(4)]
                async with asyncio.timeout(5):
                    while gate.at_door.get("127.0.0.2") != 4:
                        await asyncio.sleep(0.01)
                # Tokenless: the address's, refused ...
                tokenless = await same.get("/api/round")
                assert "your address" in assert_error(tokenless, 503, "overloaded")["detail"]
                # ... a player past its pace behind it: the address's too ...
                r = await same.get(f"/api/guesses?round_id={round_id}", headers=bearer(fast))
                assert "your address" in assert_error(r, 503, "overloaded")["detail"]
                # ... a player at an honest pace behind it: its own, served.
                guessed = await same.post(
                    "/api/guesses",
                    json={"round_id": round_id, "guess": GUESS},
                    headers=bearer(honest),
                )
                assert guessed.status_code == 202, guessed.text
            for _, writer in held:
                writer.close()
    assert gate.counts["shed_address"] == 2


async def test_fast_players_leave_a_quarter_of_their_address_to_its_other_senders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The gate alone: mashers past an honest pace at their address's bound must not lock
    # its sign-ups, pages, handshakes and tokens not yet known out.
    monkeypatch.setattr("web.door.gate.MIN_REFUSAL_S", 0.0)  # no held refusals here
    gate = Gate(limit=16, wait_ms=500, address_limit=4)
    release = asyncio.Event()

    async def work() -> str:
        await release.wait()
        return "served"

    now = gate.clock()
    for _ in range(40):  # a masher's recent rate: 20 a second
        gate.players.hit("masher", now)
    mashing = [
        asyncio.create_task(through(gate, "10.0.0.2", "masher", work, now=now)) for _ in range(4)
    ]
    await asyncio.sleep(0.01)
    assert gate.fast_at_door == {"10.0.0.2": 3} and gate.at_door == {"10.0.0.2": 3}
    newcomer = asyncio.create_task(through(gate, "10.0.0.2", None, work, now=now))
    await asyncio.sleep(0.01)
    assert gate.at_door == {"10.0.0.2": 4}
    release.set()
    answers = await asyncio.gather(*mashing, newcomer)
    assert answers.count("served") == 4 and answers[-1] == "served", answers
    assert sum(isinstance(a, Shed) and a.reason == "address" for a in answers) == 1
    assert (gate.at_door, gate.fast_at_door, gate.tokens_at_door) == ({}, {}, {})
