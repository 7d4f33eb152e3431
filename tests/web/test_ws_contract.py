"""Socket promises that need more than one player in the window to be tested honestly.

* A resume (``after=``) replays the resuming player's own scores only, even when other
  players' scores sit between theirs in the retained stream.
* Progress is coalesced at the contract's rate (at most about 4 messages a second per
  socket) while the field keeps changing, not merely "fewer messages than guesses".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

from tests.web.conftest import Served, of_type, recv, recv_until, submit, wait_completed

pytestmark = pytest.mark.usefixtures("module_worker")


async def test_a_resume_replays_only_the_players_own_scores(served: Served) -> None:
    me, other = await served.new_player("Resumer"), await served.new_player("Neighbour")
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    theirs_guess = [pal[7], pal[6], pal[7], pal[6]]  # never one of mine below
    async with connect(served.ws_url(me["token"])) as ws:
        await recv(ws), await recv(ws)
        first = await submit(served, me["token"], rid, [pal[0]] * 4)
        resume_at = (await recv_until(ws, of_type("score", job_id=first)))["event_id"]
    # Interleaved in the stream after the resume point: mine and theirs, one by one.
    mine: list[str] = []
    theirs: list[str] = []
    for i in range(3):
        mine.append(await submit(served, me["token"], rid, [pal[1], pal[2], pal[3], pal[i]]))
        await wait_completed(served, me["token"], mine[-1])
        theirs.append(await submit(served, other["token"], rid, theirs_guess))
        await wait_completed(served, other["token"], theirs[-1])
    async with connect(served.ws_url(me["token"], after=resume_at)) as ws:
        frames = []
        try:
            async with asyncio.timeout(1.0):
                while True:
                    frames.append(await ws.recv())
        except TimeoutError:
            pass
    messages = [orjson.loads(f) for f in frames]
    replayed = [m["job_id"] for m in messages if m["type"] == "score"]
    assert sorted(replayed) == sorted(mine)
    assert all(m["player_id"] == me["player_id"] for m in messages if m["type"] == "score")
    needle = orjson.dumps(theirs_guess).decode()[1:-1]
    assert not any(job in f or needle in f for f in frames for job in theirs)


async def test_progress_arrives_at_about_four_messages_a_second(served: Served) -> None:
    watcher = await served.new_player("Watcher")
    players = [await served.new_player(f"Field{i}") for i in range(8)]
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    window_s = 3.0

    async def keep_guessing(token: str, offset: int) -> None:
        """One guess every 100 ms per player: the field changes far more often than 4/s."""
        end = time.monotonic() + window_s + 0.5
        i = offset
        while time.monotonic() < end:
            await submit(served, token, rid, [pal[i % 8], pal[(i + 1) % 8], pal[0], pal[1]])
            i += 1
            await asyncio.sleep(0.1)

    async with connect(served.ws_url(watcher["token"])) as ws:
        await recv(ws), await recv(ws)
        field = [asyncio.create_task(keep_guessing(p["token"], n)) for n, p in enumerate(players)]
        await asyncio.sleep(0.5)  # the field is moving
        stamps: list[float] = []
        started = time.monotonic()
        try:
            async with asyncio.timeout(window_s):
                while True:
                    message: dict[str, Any] = orjson.loads(await ws.recv())
                    if message["type"] == "progress":
                        stamps.append(time.monotonic() - started)
        except TimeoutError:
            pass
        await asyncio.gather(*field)
    # The flusher ticks every 250 ms: 12 ticks in 3 s, each with changes to send. Allow
    # one tick of slack either way; a flusher ten times faster sends ~120.
    assert 8 <= len(stamps) <= 14, stamps
    busiest = max(sum(1 for t in stamps if s <= t < s + 1.0) for s in stamps)
    assert busiest <= 6, stamps  # "at most about 4 messages a second", in any second
