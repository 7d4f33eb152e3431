"""Several processes, one game: two ``codemojex web`` and three ``codemojex worker``
processes against one Valkey (a single node, and a 3-master cluster) and one PostgreSQL.
Players submit through both web processes, one worker is SIGKILLed mid-score; every guess
is scored exactly once, each web process pushes every score to its own sockets once, and
the two leaderboards agree. On the cluster it runs twice: the guesses queue in one slot
(one master carries it), and over three partitions (``--partitions 3``: the players'
lanes spread over the masters)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import websockets
from redis.asyncio.cluster import RedisCluster

import echomq
from echomq.connection import connect
from echomq.keys import Keys
from echomq.partitions import PartitionedStats, partition_names, partition_of
from echomq.server import EmbeddedValkey
from harness.cluster import ValkeyCluster
from harness.pg import PgCluster
from harness.running import wait_until
from tests.distributed.game import Player, running

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

PLAYERS = 10
GUESSES = 6  # per player, alternating between the two web processes


@pytest.fixture(params=["single", "cluster", "cluster-partitioned"])
def valkey(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A Valkey URL of the test's own (the game's keys have fixed names)."""
    if request.param == "single":
        server = EmbeddedValkey(tmp_path / "valkey", maxmemory=128 * 1024**2)
        server.start()
        try:
            yield server.url
        finally:
            server.stop()
    else:
        cluster = ValkeyCluster(tmp_path / "cluster", masters=3)
        cluster.start()
        try:
            yield cluster.url
        finally:
            cluster.stop()


@pytest.fixture
def partitions(request: pytest.FixtureRequest) -> int:
    return 3 if request.node.callspec.params["valkey"] == "cluster-partitioned" else 1


def _stats(url: str, partitions: int) -> PartitionedStats:
    async def go() -> PartitionedStats:
        conn = connect(url)
        try:
            return await echomq.Partitioned(conn, "guesses", partitions).stats()
        finally:
            await conn.aclose()

    return asyncio.run(go())


def _masters_of(url: str, keys: list[str]) -> set[str]:
    async def go() -> set[str]:
        conn = connect(url)
        assert isinstance(conn, RedisCluster)
        try:
            await conn.initialize()
            nodes = [conn.get_node_from_key(k) for k in keys]
            return {n.name for n in nodes if n is not None}
        finally:
            await conn.aclose()

    return asyncio.run(go())


def test_two_webs_three_workers_one_killed_mid_score(
    tmp_path: Path, valkey: str, partitions: int, pg_cluster: PgCluster
) -> None:
    with contextlib.ExitStack() as stack:
        game = stack.enter_context(
            running(
                tmp_path,
                valkey,
                "--round-seconds",
                "600",
                "--guess-rate",
                "0",
                "--partitions",
                str(partitions),
                database_url=pg_cluster.create_database(),
            )
        )
        bases = [game.web(wait=False), game.web(wait=False)]
        for _ in range(2):
            game.worker("--score-delay-ms", "300", "--concurrency", "4")
        # The victim scores slowly: each guess it takes is held across several of its
        # heartbeats (one a second while busy), so the admin page shows it scoring before
        # the kill, where a 300 ms guess can be claimed and done between two beats.
        slow = game.worker("--score-delay-ms", "3000", "--concurrency", "4")
        game.wait_webs()
        https = [
            stack.enter_context(httpx.Client(base_url=b, timeout=10, trust_env=False))
            for b in bases
        ]
        admin = {"Authorization": "Bearer " + "a" * 32}

        def workers() -> list[dict[str, Any]]:
            r = https[1].get("/api/admin/workers", headers=admin)
            assert r.status_code == 200, r.text
            return [w for w in r.json()["workers"] if w["alive"]]

        wait_until(lambda: len(workers()) == 3, 30, "three workers alive")
        players = [Player(https[i % 2], f"m{i}") for i in range(PLAYERS)]
        # Ten random ids leave a partition without a player about one run in twenty; the
        # test asserts that every partition carried guesses, so join until each has one.
        while len({partition_of(p.player_id, partitions) for p in players}) < partitions:
            assert len(players) < 5 * PLAYERS, "player ids do not spread over the partitions"
            players.append(Player(https[len(players) % 2], f"m{len(players)}"))
        round_ = https[0].get("/api/round").json()

        async def play() -> tuple[dict[str, list[str]], dict[str, list[str]], list[int]]:
            # Player i's socket is on web i % 2; its guesses go through both webs.
            socks = {
                p.player_id: await websockets.connect(
                    f"ws://{bases[i % 2][7:]}/ws?token={p.token}", open_timeout=5
                )
                for i, p in enumerate(players)
            }
            try:
                for ws in socks.values():
                    await ws.recv()  # greeted
                sent: dict[str, list[str]] = {p.player_id: [] for p in players}
                killed: list[int] = []
                async with httpx.AsyncClient(timeout=10, trust_env=False) as h:
                    for n in range(GUESSES):
                        for p in players:
                            r = await h.post(
                                f"{bases[n % 2]}/api/guesses",
                                headers=p.headers,
                                json={"round_id": round_["round_id"], "guess": ["🍌"] * 4},
                            )
                            assert r.status_code == 202, r.text
                            sent[p.player_id].append(r.json()["job_id"])
                        if n == 1:  # guesses are being scored now: kill the slow scorer
                            victim = await asyncio.to_thread(
                                wait_until,
                                lambda: next(
                                    (
                                        w
                                        for w in workers()
                                        if w["state"] == "scoring" and w["pid"] == slow.pid
                                    ),
                                    None,
                                ),
                                10,
                                "the slow worker scoring",
                                lambda: f"slow pid {slow.pid}; workers: {workers()}",
                            )
                            r = await h.post(
                                f"{bases[1]}/api/admin/workers/{victim['worker_id']}/kill",
                                headers=admin,
                            )
                            assert r.status_code == 202, r.text
                            killed.append(int(victim["pid"]))
                got: dict[str, list[str]] = {p.player_id: [] for p in players}

                async def collect(pid: str, ws: websockets.ClientConnection) -> None:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(60):
                            while len(got[pid]) < GUESSES:
                                m = orjson.loads(await ws.recv())
                                if m["type"] == "score":
                                    got[pid].append(m["job_id"])
                    with contextlib.suppress(TimeoutError):  # and nothing more comes
                        async with asyncio.timeout(1.0):
                            while True:
                                m = orjson.loads(await ws.recv())
                                if m["type"] == "score":
                                    got[pid].append(m["job_id"])

                await asyncio.gather(*(collect(pid, ws) for pid, ws in socks.items()))
                return sent, got, killed
            finally:
                for ws in socks.values():
                    await ws.close()

        t0 = time.monotonic()
        sent, got, killed = asyncio.run(play())
        accepted = {j for jobs in sent.values() for j in jobs}
        assert len(accepted) == len(players) * GUESSES
        for pid in sent:  # each socket got every score of its player, once
            assert sorted(got[pid]) == sorted(sent[pid]), pid
        wait_until(lambda: set(game.scores()) == accepted, 60, "every guess in SQL")
        assert set(game.scores().values()) == {1}
        stats = _stats(valkey, partitions)
        counters = stats["counters"]
        assert counters["completed"] == counters["enqueued"] == len(accepted), counters
        assert counters.get("reaped", 0) >= 1  # the killed worker was mid-score
        assert stats["active"] == stats["pending"] == stats["dead"] == 0
        if partitions > 1:  # every partition carried guesses, each on its own master
            assert all(p["counters"].get("completed", 0) > 0 for p in stats["partitions"])
            prefixes = [Keys(q).prefix for q in partition_names("guesses", 3)]
            assert len(_masters_of(valkey, prefixes)) == 3  # one partition per master
        boards = [h.get("/api/leaderboard").json() for h in https]
        assert boards[0] == boards[1]
        assert {p["player_id"] for p in boards[0]["players"]} == set(sent)
        (dead,) = [w for w in game.workers if w.poll() is not None]
        assert dead.pid == killed[0] and dead.returncode == -signal.SIGKILL
        assert sum(1 for w in game.workers if w.poll() is None) == 2
        print(
            f"\n{'cluster' if 'cluster' in valkey else 'single node'}, {partitions} partition(s): "
            f"{len(accepted)} guesses, reaped {counters.get('reaped', 0)}, "
            f"{time.monotonic() - t0:.1f} s"
        )
