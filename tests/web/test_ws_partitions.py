"""The socket on a partitioned game (``partitions=3``): a real uvicorn, a real worker
process claiming from every partition. Each player's scores come from their partition's
events stream, so live scores, the resume with ``after=`` and the gap all follow that
stream; the admin page and the metrics sum the partitions."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis.asyncio
from websockets.asyncio.client import connect

from echomq.keys import Keys
from echomq.partitions import partition_names, partition_of
from tests.web.conftest import (
    ADMIN_TOKEN,
    Served,
    bearer,
    drain,
    of_type,
    recv,
    recv_until,
    submit,
    wait_completed,
)

PARTITIONS = 3
NAMES = partition_names("guesses", PARTITIONS)
pytestmark = pytest.mark.usefixtures("module_worker")


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"partitions": PARTITIONS}


def _guess(rnd: dict[str, Any], *picks: int) -> list[str]:
    return [rnd["palette"][i] for i in picks]


async def _players_on_every_partition(served: Served) -> dict[int, dict[str, Any]]:
    """One player per partition (player ids are random: make players until covered)."""
    found: dict[int, dict[str, Any]] = {}
    for i in range(60):
        player = await served.new_player(f"P{i}")
        found.setdefault(partition_of(player["player_id"], PARTITIONS), player)
        if len(found) == PARTITIONS:
            return found
    raise AssertionError("60 players never covered three partitions")


async def test_every_partition_streams_its_players_scores_and_resumes(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    players = await _players_on_every_partition(served)
    rnd = await served.current_round()
    rid = rnd["round_id"]
    seen: dict[int, str] = {}
    for i, player in players.items():
        async with connect(served.ws_url(player["token"])) as ws:
            await recv(ws), await recv(ws)  # round, leaderboard
            job = await submit(served, player["token"], rid, _guess(rnd, 0, 1, 2, i))
            score = await recv_until(ws, of_type("score", job_id=job))
            # a position in the player's own partition's stream
            own = Keys(NAMES[i]).events
            assert await valkey.xrange(own, score["event_id"], score["event_id"])
            seen[i] = score["event_id"]
    # While every socket is away, each player scores two more; other players' events
    # land in the other streams meanwhile, with ids of their own.
    missed: dict[int, list[str]] = {i: [] for i in players}
    for i, player in players.items():
        for k in range(2):
            missed[i].append(await submit(served, player["token"], rid, _guess(rnd, 3, 2, k, i)))
    for i, player in players.items():
        for job in missed[i]:
            await wait_completed(served, player["token"], job)
    for i, player in players.items():
        async with connect(served.ws_url(player["token"], after=seen[i])) as ws:
            greeting = [await recv(ws), await recv(ws)]
            replay = [await recv(ws) for _ in missed[i]]
            rest = [orjson.loads(f) for f in await drain(ws, 0.3)]
        assert [m["type"] for m in greeting] == ["round", "leaderboard"]
        assert sorted(m["job_id"] for m in replay) == sorted(missed[i])
        assert all(m["player_id"] == player["player_id"] for m in replay)
        scores = [m["job_id"] for m in replay + rest if m["type"] == "score"]
        assert sorted(scores) == sorted(missed[i])  # once each, none of another partition
        assert not [m for m in rest if m["type"] == "gap"]


async def test_a_trimmed_partition_gives_its_players_a_gap(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    players = await _players_on_every_partition(served)
    rnd = await served.current_round()
    for i, player in players.items():
        for k in range(2):
            job = await submit(served, player["token"], rnd["round_id"], _guess(rnd, k, 1, 1, i))
            await wait_completed(served, player["token"], job)
    await valkey.xtrim(Keys(NAMES[1]).events, maxlen=1, approximate=False)
    for i, player in players.items():
        async with connect(served.ws_url(player["token"], after="1-0")) as ws:
            kinds = [(await recv(ws))["type"] for _ in range(3)]
        # only the trimmed partition's player lost events; the others replay from 1-0
        assert (kinds[2] == "gap") == (i == 1), (i, kinds)


async def test_the_admin_queue_view_and_metrics_sum_the_partitions(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    players = await _players_on_every_partition(served)
    rnd = await served.current_round()
    for i, player in players.items():
        job = await submit(served, player["token"], rnd["round_id"], _guess(rnd, 2, 2, 0, i))
        await wait_completed(served, player["token"], job)
    view = (await served.http.get("/api/admin/queue", headers=bearer(ADMIN_TOKEN))).json()
    counted = 0
    for i in range(PARTITIONS):
        raw = await valkey.hget(Keys(NAMES[i]).counters, "completed")
        assert raw is not None and int(raw) > 0  # every partition scored something
        counted += int(raw)
    assert view["counters"]["scored"] == counted
    text = (await served.http.get("/metrics")).text
    assert f"codemojex_queue_scored_total {float(counted)}" in text
    workers = (await served.http.get("/api/admin/workers", headers=bearer(ADMIN_TOKEN))).json()
    assert [w["alive"] for w in workers["workers"]] == [True]  # one worker, not one per slot
