"""A resume reads at most ``replay_max_events`` events of the stream, everyone's counted:
a window of exactly that many is replayed (the player's own scores only), one more and
the socket gets a ``gap`` instead (the page refetches). Found by mutation testing
(tools/mutation/run.py, group ``hub``): nothing reached the bound of ``Hub.replay``, its
paging, or a completion that is not a score.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

import echomq
import web.messages
import web.replay
from tests.web.conftest import Served, drain, of_type, recv, recv_until, submit, wait_completed

pytestmark = pytest.mark.usefixtures("module_worker")

BUDGET = 4


@pytest.fixture(scope="module")
def game_settings() -> dict[str, Any]:
    return {"replay_max_events": BUDGET}


async def _resume(served: Served, mine: int, theirs: int) -> tuple[list[dict[str, Any]], list[str]]:
    """A socket resumes after ``mine`` of its own and ``theirs`` of another player's scores
    were completed while it was away: what it is sent after the greeting, and its jobs."""
    me, other = await served.new_player("Me"), await served.new_player("Other")
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    async with connect(served.ws_url(me["token"])) as ws:
        await recv(ws), await recv(ws)
        first = await submit(served, me["token"], rid, [pal[0]] * 4)
        seen = (await recv_until(ws, of_type("score", job_id=first)))["event_id"]
    jobs = []
    for i in range(max(mine, theirs)):  # interleaved: the window is everyone's events
        for who, n, own in ((other, theirs, False), (me, mine, True)):
            if i < n:
                job = await submit(served, who["token"], rid, [pal[1], pal[2], pal[3], pal[i]])
                await wait_completed(served, who["token"], job)
                if own:
                    jobs.append(job)
    async with connect(served.ws_url(me["token"], after=seen)) as ws:
        greeting = [await recv(ws), await recv(ws)]
        rest = [orjson.loads(f) for f in await drain(ws, 1.0)]
    assert [m["type"] for m in greeting] == ["round", "leaderboard"]
    return [m for m in rest if m["type"] in ("score", "gap")], jobs


async def test_a_window_of_exactly_the_budget_is_replayed_own_scores_only(served: Served) -> None:
    sent, mine = await _resume(served, mine=2, theirs=BUDGET - 2)
    assert [m["type"] for m in sent] == ["score", "score"]
    assert sorted(m["job_id"] for m in sent) == sorted(mine)


async def test_a_replay_over_several_pages_sends_each_own_score_once(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 3 over a window of 4 (other, me, other, me): my second score is on the
    # second page, which starts after the first page's last event and is short: the end.
    monkeypatch.setattr(web.replay, "REPLAY_PAGE", 3)
    sent, mine = await _resume(served, mine=2, theirs=BUDGET - 2)
    assert [m["type"] for m in sent] == ["score", "score"]
    assert sorted(m["job_id"] for m in sent) == sorted(mine)


async def test_one_event_past_the_budget_is_a_gap_and_no_replay(served: Served) -> None:
    sent, _ = await _resume(served, mine=2, theirs=BUDGET - 1)
    assert [m["type"] for m in sent] == ["gap"]


@pytest.mark.parametrize(
    "result",
    ["[1, 2]", '"text"', "7", '{"player_id": 7}', '{"round_id": "r"}', "not json"],
)
def test_a_completion_that_is_not_a_score_is_no_message(result: str) -> None:
    event = echomq.Event("1-0", "completed", "j", {"result": result})
    assert web.messages.score_message(event) is None


def test_a_score_message_carries_the_owner() -> None:
    event = echomq.Event("1-0", "completed", "j", {"result": '{"player_id": "p", "seq": 0}'})
    message = web.messages.score_message(event)
    assert message is not None and message["player_id"] == "p" and message["job_id"] == "j"
    assert web.messages.score_message(echomq.Event("1-0", "failed", "j", event.fields)) is None
