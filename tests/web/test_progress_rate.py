"""The progress rate as one socket sees it (docs/contract.md §4): at most about 4 ``progress``
messages a second, whatever the field, and only when something in it changed.

Against the process users run (``codemojex up``: its web server, its ScoreWorkers, its
Valkey), with a real websocket client: players guess continuously over HTTP while one of
them watches on a socket, and the progress messages that reach it are counted over a window
of a few seconds — a count, not a timing. The bound is the contract's figure, written here
and not read from the hub, so that a hub whose interval shrinks fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import websockets

from harness.running import Up

pytestmark = pytest.mark.slow

CONTRACT_PER_S = 4  # "a socket gets at most about 4 such messages a second"
WINDOW_S = 4.0
WARM_UP_S = 1.0  # the socket's greeting and snapshot, the field's first changes
# The contract's 4 a second give at most 17 messages in a 4 s window (one at each end);
# one more for a message that a stall of either process carried across the window's start.
BOUND = int(CONTRACT_PER_S * WINDOW_S) + 2
# Requests in flight from the test at once: under the web's door (16), so the crowd's
# guesses are answered rather than shed.
IN_FLIGHT = 12


@dataclass
class Seen:
    """What the watching socket received: (arrival time, message) in order."""

    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def progress(self, start: float, end: float) -> list[dict[str, Any]]:
        return [m for at, m in self.messages if m["type"] == "progress" and start <= at < end]


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    # Rounds far longer than the test: a rotation mid-window would close the players' round.
    game = Up(tmp_path / "data", "--workers", "2", "--round-seconds", "600")
    try:
        yield game.start().wait_ready()
    finally:
        game.kill_everything()


async def _players(http: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    players = []
    for i in range(count):
        r = await http.post("/api/players", json={"name": f"Player{i}"})
        assert r.status_code == 201, r.text
        players.append(dict(r.json()))
    return players


async def _keep_guessing(
    http: httpx.AsyncClient,
    player: dict[str, Any],
    k: int,
    round_: dict[str, Any],
    per_s: float,
    gate: asyncio.Semaphore,
    answers: dict[int, int],
) -> None:
    """Guess every ``1/per_s`` seconds until cancelled (under the per-player rate, 10/s)."""
    pal = round_["palette"]
    for i in itertools.count():
        guess = [pal[(i + k) % 8], pal[(i // 8 + k) % 8], pal[(i // 64) % 8], pal[k % 8]]
        async with gate:
            r = await http.post(
                "/api/guesses",
                json={"round_id": round_["round_id"], "guess": guess},
                headers={"Authorization": f"Bearer {player['token']}"},
            )
        answers[r.status_code] = answers.get(r.status_code, 0) + 1
        await asyncio.sleep(1 / per_s)


async def _watch(ws: websockets.ClientConnection, seen: Seen) -> None:
    async for raw in ws:
        seen.messages.append((time.monotonic(), orjson.loads(raw)))


@pytest.mark.parametrize(
    ("players", "per_s"),
    [(2, 8.0), (80, 2.0)],
    ids=["small-field", "crowded-field"],
)
async def test_one_socket_gets_at_most_about_four_progress_messages_a_second(
    up: Up, players: int, per_s: float
) -> None:
    async with httpx.AsyncClient(base_url=up.base, timeout=10, trust_env=False) as http:
        field_ = await _players(http, players)
        r = await http.get("/api/round")
        assert r.status_code == 200, r.text
        round_ = r.json()
        seen, answers = Seen(), dict[int, int]()
        gate = asyncio.Semaphore(IN_FLIGHT)
        # The first player watches the field while playing, as a page does.
        url = f"ws://127.0.0.1:{up.port}/ws?token={field_[0]['token']}"
        async with websockets.connect(url, open_timeout=5) as ws:
            tasks = [asyncio.create_task(_watch(ws, seen))]
            tasks += [
                asyncio.create_task(_keep_guessing(http, p, k, round_, per_s, gate, answers))
                for k, p in enumerate(field_)
            ]
            try:
                await asyncio.sleep(WARM_UP_S)
                start = time.monotonic()
                await asyncio.sleep(WINDOW_S)
                end = time.monotonic()
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    counted = seen.progress(start, end)
    ours = [m for m in counted if m["round_id"] == round_["round_id"]]
    # The field was what the case says, and changing all along: progress kept coming.
    assert answers.get(202, 0) >= players, answers
    assert len(ours) >= 2, (len(counted), answers)
    assert ours[-1]["playing"] == players, ours[-1]
    assert len(ours[-1]["players"]) == min(players, 20)
    frames = [orjson.dumps(m) for m in seen.progress(0, end)]
    repeats = [(i, a) for i, (a, b) in enumerate(itertools.pairwise(frames)) if a == b]
    assert not repeats, f"a progress with no change, after {len(frames)}: {repeats[:2]}"
    assert len(counted) <= BOUND, (
        f"{len(counted)} progress messages in {WINDOW_S} s on one socket "
        f"(the contract: about {CONTRACT_PER_S} a second, at most {BOUND} here)"
    )
