"""What the hub fans out after a score: to each of the owner's sockets (one closing does
not orphan the others), the field's progress carrying the score's feedback, and a solve
marking the leaderboard for the next broadcast.

Found by mutation testing (tools/mutation/run.py, group ``hub``): the progress rows were
only ever checked for their counts, and the solve's leaderboard test passed on the hub's
first broadcast (the board starts out dirty), so dropping "a solve dirties the board"
went unnoticed; nor did forgetting a player's other sockets when one of them closed, nor
dropping the score's seq (which only a web process that did not accept the guess needs).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from websockets.asyncio.client import connect

import web.hub
from codemojex.rules import feedback
from tests.web.conftest import (
    Served,
    drain,
    of_type,
    recv,
    recv_until,
    secret_of,
    serve,
    submit,
    wait_completed,
)

pytestmark = pytest.mark.usefixtures("module_worker")


def _rows(message: dict[str, Any], player_id: str) -> list[dict[str, Any]]:
    if message["type"] != "progress":
        return []
    return [p for p in message["players"] if p["player_id"] == player_id]


def _scored(player_id: str, n: int) -> Any:
    """A progress message whose row of ``player_id`` counts ``n`` scored guesses (a row
    from the guess's acceptance alone, before its score, has none)."""
    return lambda m: any(p["scored"] == n for p in _rows(m, player_id))


async def test_progress_carries_the_best_feedback_and_the_solve(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    watcher, player = await served.new_player("Watcher"), await served.new_player("Player")
    rnd = await served.current_round()
    secret = await secret_of(valkey, rnd["round_id"])
    # A guess that neither solves nor misses entirely: the secret rotated by one.
    near_miss = secret[1:] + secret[:1]
    if near_miss == secret:  # four of one emoji: change one cell instead
        near_miss = [next(e for e in rnd["palette"] if e != secret[0]), *secret[1:]]
    fb = feedback(secret, near_miss)
    assert not fb.solved
    async with connect(served.ws_url(watcher["token"])) as ws:
        await recv(ws), await recv(ws)
        await submit(served, player["token"], rnd["round_id"], near_miss)
        row = _rows(await recv_until(ws, _scored(player["player_id"], 1)), player["player_id"])[0]
        assert (row["best_exact"], row["best_near"], row["solved"]) == (fb.exact, fb.near, False)
        await submit(served, player["token"], rnd["round_id"], secret)
        row = _rows(await recv_until(ws, _scored(player["player_id"], 2)), player["player_id"])[0]
    assert (row["best_exact"], row["best_near"], row["solved"]) == (4, 0, True)


async def test_a_solve_after_the_first_broadcast_still_updates_the_leaderboard(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    player = await served.new_player("Solver")
    rnd = await served.current_round()
    secret = await secret_of(valkey, rnd["round_id"])
    async with connect(served.ws_url(player["token"])) as ws:
        await recv(ws), await recv(ws)
        # Let the hub's first flush spend the board's initial "dirty": from here on only
        # a solve can make it broadcast a leaderboard again.
        await asyncio.sleep(web.hub.LEADERBOARD_INTERVAL_S + 2 * web.hub.PROGRESS_INTERVAL_S)
        await drain(ws, 0.1)
        job = await submit(served, player["token"], rnd["round_id"], secret)
        await recv_until(ws, of_type("score", job_id=job))
        board = await recv_until(ws, of_type("leaderboard"))
    row = next(p for p in board["players"] if p["player_id"] == player["player_id"])
    assert row["points"] == 110 and row["solved_rounds"] == 1


async def test_a_players_other_socket_still_gets_scores_after_one_closes(served: Served) -> None:
    player = await served.new_player("Two tabs")
    rnd = await served.current_round()
    url = served.ws_url(player["token"])
    async with connect(url) as kept:
        await recv(kept), await recv(kept)
        async with connect(url) as closed:
            await recv(closed), await recv(closed)
        async with asyncio.timeout(5):  # until the server has seen the second tab go
            while len(served.hub._conns) > 1:
                await asyncio.sleep(0.02)
        job = await submit(served, player["token"], rnd["round_id"], [rnd["palette"][0]] * 4)
        score = await recv_until(kept, of_type("score", job_id=job))
    assert score["player_id"] == player["player_id"]


async def test_a_web_process_that_accepted_no_guess_counts_them_from_the_score(
    served: Served,
) -> None:
    # Process B starts after two of the player's guesses were scored through A: it knows
    # of the third guess only from its score event, whose seq says it was the third.
    watcher, player = await served.new_player("Watcher"), await served.new_player("Player")
    rnd = await served.current_round()
    pal = rnd["palette"]
    for i in range(2):
        job = await submit(served, player["token"], rnd["round_id"], [pal[i]] * 4)
        await wait_completed(served, player["token"], job)
    async with serve(served.config) as other, connect(other.ws_url(watcher["token"])) as ws:
        await recv(ws), await recv(ws)
        await submit(served, player["token"], rnd["round_id"], [pal[2]] * 4)
        row = _rows(await recv_until(ws, _scored(player["player_id"], 1)), player["player_id"])[0]
    assert row["guesses"] == 3
