"""The game on a real 3-master Valkey Cluster: ``codemojex web`` and two ``codemojex
worker`` processes (the real CLI, ``--valkey-url redis://…?cluster=true``), guesses over
HTTP, every one scored exactly once, and each score pushed once to its player's socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import websockets

import echomq
from tests.cli.running import wait_until
from tests.cluster import ValkeyCluster
from tests.distributed.game import Player, running

pytestmark = pytest.mark.slow

PLAYERS = 12
GUESSES = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    """A cluster of the game's own: the game's keys have fixed names."""
    cluster = ValkeyCluster(tmp_path / "cluster", masters=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_guesses_are_scored_once_on_a_cluster(tmp_path: Path, cluster: ValkeyCluster) -> None:
    # The queues' slots live on different masters: a real spread, not one node doing all.
    owners = {cluster.master_of(f"emq:{{{q}}}:") for q in ("guesses", "rounds")}
    owners.add(cluster.master_of("cmx:{workers}:"))
    assert len(owners) >= 2, owners
    with contextlib.ExitStack() as stack:
        game = stack.enter_context(running(tmp_path, cluster.url, "--round-seconds", "300"))
        base = game.web()
        game.worker()
        game.worker()
        http = stack.enter_context(httpx.Client(base_url=base, timeout=10, trust_env=False))
        players = [Player(http, f"c{i}") for i in range(PLAYERS)]
        round_ = http.get("/api/round").json()

        async def play() -> tuple[set[str], dict[str, list[str]]]:
            token = players[0].headers["Authorization"].split()[1]
            ws = await websockets.connect(f"ws://{base[7:]}/ws?token={token}", open_timeout=5)
            try:
                accepted: set[str] = set()
                mine: list[str] = []
                for n in range(GUESSES):
                    for p in players:
                        r = p.guess(round_, n)
                        assert r.status_code == 202, r.text
                        accepted.add(r.json()["job_id"])
                        if p is players[0]:
                            mine.append(r.json()["job_id"])
                pushed: list[str] = []
                async with asyncio.timeout(30):
                    while len(pushed) < len(mine):
                        m = orjson.loads(await ws.recv())
                        if m["type"] == "score":
                            pushed.append(m["job_id"])
                return accepted, {"mine": mine, "pushed": pushed}
            finally:
                await ws.close()

        accepted, seen = asyncio.run(play())
        assert len(accepted) == PLAYERS * GUESSES
        assert sorted(seen["pushed"]) == sorted(seen["mine"])  # each score once, none else
        wait_until(lambda: set(game.scores()) == accepted, 60, "every guess scored", game.scores)
        assert set(game.scores().values()) == {1}

        async def stats() -> dict[str, object]:
            conn = cluster.client()
            try:
                return await echomq.Queue(conn, "guesses").stats()
            finally:
                await conn.aclose()

        s = asyncio.run(stats())
        counters = s["counters"]
        assert isinstance(counters, dict)
        assert counters["enqueued"] == counters["completed"] == len(accepted), counters
        assert s["pending"] == s["active"] == s["dead"] == 0
        board = http.get("/api/leaderboard").json()["players"]
        assert {p["player_id"] for p in board} <= {p.player_id for p in players}
        for proc in [*game.workers, game.webs[0][0]]:
            assert proc.poll() is None
