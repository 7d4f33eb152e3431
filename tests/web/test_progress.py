"""Bounded progress (docs/contract.md §4): the field's counts and at most 20 leaders, in the
contract's order, whatever the crowd; paced by the process's fan-out budget.

The leaders are re-selected only when a change could have moved one; a property test
checks that shortcut against selecting from scratch after every step.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

import web.hub
from tests.web.conftest import Served, drain, recv, recv_until, submit, wait_completed
from web.progress import LEADERS, FieldProgress, PlayerProgress

RID = "RND_TEST"


def _brute_leaders(players: dict[str, PlayerProgress]) -> list[str]:
    ranked = sorted(players, key=lambda pid: players[pid].rank(pid))
    return ranked[:LEADERS]


ops = st.lists(
    st.tuples(
        st.sampled_from(["accepted", "scored"]),
        st.integers(0, 39),  # player
        st.integers(0, 30),  # seq
        st.integers(0, 4),  # exact
        st.integers(0, 4),  # near
        st.booleans(),  # solved
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_leaders_and_counts_match_a_selection_from_scratch(steps: list[Any]) -> None:
    field = FieldProgress()
    for kind, player, seq, exact, near, solved in steps:
        pid = f"PLR_{player:02d}"
        if kind == "accepted":
            field.accepted(RID, pid, seq)
        else:
            field.scored(RID, pid, seq, exact, near, solved and exact == 4)
        r = field.round(RID)
        assert r is not None
        assert [pid for pid, _ in r.top()] == _brute_leaders(r.players)
        assert r.playing == len(r.players)
        assert r.guesses == sum(p.guesses for p in r.players.values())
        assert r.solved == sum(p.solved for p in r.players.values())


def test_the_order_is_solved_by_seq_then_exact_near_and_fewest_guesses() -> None:
    field = FieldProgress()
    field.scored(RID, "PLR_late_solver", 5, 4, 0, True)
    field.scored(RID, "PLR_early_solver", 2, 4, 0, True)
    field.scored(RID, "PLR_three_exact", 0, 3, 0, False)
    field.scored(RID, "PLR_two_exact_one_near", 0, 2, 1, False)
    field.scored(RID, "PLR_two_exact", 0, 2, 0, False)
    field.scored(RID, "PLR_two_exact_more_guesses", 3, 2, 0, False)
    r = field.round(RID)
    assert r is not None
    assert [pid for pid, _ in r.top()] == [
        "PLR_early_solver",
        "PLR_late_solver",
        "PLR_three_exact",
        "PLR_two_exact_one_near",
        "PLR_two_exact",
        "PLR_two_exact_more_guesses",
    ]
    assert (r.playing, r.solved) == (6, 2)


def test_a_crowd_keeps_the_message_bounded() -> None:
    field = FieldProgress()
    for i in range(10_000):
        field.accepted(RID, f"PLR_{i:05d}", 0)
    r = field.round(RID)
    assert r is not None
    assert len(r.top()) == LEADERS and (r.playing, r.guesses) == (10_000, 10_000)


pytestmark_served = pytest.mark.usefixtures("module_worker")


@pytestmark_served
async def test_a_watcher_gets_the_counts_and_twenty_leaders(served: Served) -> None:
    watcher = await served.new_player("Watcher")
    field = [await served.new_player(f"P{i}") for i in range(LEADERS + 5)]
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    async with connect(served.ws_url(watcher["token"])) as ws:
        await recv(ws), await recv(ws)
        jobs = [
            (p, await submit(served, p["token"], rid, [pal[0], pal[1], pal[2], pal[i % 8]]))
            for i, p in enumerate(field)
        ]
        for p, job in jobs:
            await wait_completed(served, p["token"], job)
        last = await recv_until(
            ws, lambda m: m["type"] == "progress" and m["guesses"] >= len(field), timeout=10
        )
    assert (last["round_id"], last["playing"], last["guesses"]) == (rid, len(field), len(field))
    assert len(last["players"]) == LEADERS
    ids = {p["player_id"] for p in field}
    assert {row["player_id"] for row in last["players"]} <= ids
    keys = [(-r["best_exact"], -r["best_near"], r["guesses"]) for r in last["players"]]
    assert keys == sorted(keys), "unsolved leaders by best exact, best near, fewest guesses"
    assert all("guess" not in row for row in last["players"]), "never anyone's emojis"


@pytestmark_served
async def test_a_new_socket_gets_the_bounded_snapshot(served: Served) -> None:
    field = [await served.new_player(f"S{i}") for i in range(LEADERS + 2)]
    rnd = await served.current_round()
    for i, p in enumerate(field):
        job = await submit(served, p["token"], rnd["round_id"], [rnd["palette"][i % 8]] * 4)
        await wait_completed(served, p["token"], job)
    await asyncio.sleep(2 * web.hub.PROGRESS_INTERVAL_S + 0.5)  # one flush at least
    late = await served.new_player("Late")
    async with connect(served.ws_url(late["token"])) as ws:
        await recv(ws), await recv(ws)
        snapshot = await recv_until(ws, lambda m: m["type"] == "progress", timeout=3)
    assert len(snapshot["players"]) == LEADERS
    assert snapshot["playing"] >= len(field)


@pytestmark_served
@pytest.mark.slow
async def test_a_crowded_process_stretches_the_interval(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget of 4 frames a second over 2 sockets: a progress broadcast (2 frames) keeps
    # the flusher quiet for half a second, however often the field changes.
    monkeypatch.setattr(web.hub, "FANOUT_FRAMES_PER_S", 4)
    watcher, mover = await served.new_player("Watcher"), await served.new_player("Mover")
    rnd = await served.current_round()
    rid, pal = rnd["round_id"], rnd["palette"]
    window_s = 3.0

    async def keep_guessing() -> None:
        end, i = time.monotonic() + window_s + 0.5, 0
        while time.monotonic() < end:
            await submit(served, mover["token"], rid, [pal[i % 8], pal[1], pal[2], pal[3]])
            i += 1
            await asyncio.sleep(0.125)  # 8 a second: under the per-player rate (10/s)

    async with (
        connect(served.ws_url(watcher["token"])) as ws,
        connect(served.ws_url(mover["token"])) as _mine,
    ):
        await recv(ws), await recv(ws)
        moving = asyncio.create_task(keep_guessing())
        await asyncio.sleep(0.5)
        frames = await drain(ws, window_s)
        await moving
    progress = [m for m in map(orjson.loads, frames) if m["type"] == "progress"]
    # Unpaced this would be ~12 (every 250 ms); paced, about 6 at most.
    assert 3 <= len(progress) <= 7, len(progress)
