"""The live socket against a real uvicorn and a real ScoreWorker process."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson
import pytest
import redis.asyncio
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Origin, Subprotocol

from harness.helpers import free_port
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


async def _greeted(ws: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return await recv(ws), await recv(ws)


def _pos(event_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in event_id.split("-"))


def _guess(rnd: dict[str, Any], *picks: int) -> list[str]:
    return [rnd["palette"][i] for i in picks]


async def test_greeting_is_the_round_then_the_leaderboard(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    async with connect(served.ws_url(player["token"])) as ws:
        first, second = await _greeted(ws)
    assert first["type"] == "round" and first["round_id"] == rnd["round_id"]
    assert first["state"] == "open" and "secret" not in first
    assert first["opens_at"] == rnd["opens_at"] and first["closes_at"] == rnd["closes_at"]
    assert second["type"] == "leaderboard" and isinstance(second["players"], list)


async def test_a_score_reaches_its_owner_with_the_event_id(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    async with connect(served.ws_url(player["token"])) as ws:
        await _greeted(ws)
        job = await submit(served, player["token"], rnd["round_id"], _guess(rnd, 0, 1, 2, 3))
        score = await recv_until(ws, of_type("score"))
    assert score["job_id"] == job and score["player_id"] == player["player_id"]
    assert score["round_id"] == rnd["round_id"] and score["seq"] == 0
    assert score["guess"] == _guess(rnd, 0, 1, 2, 3)
    assert re.fullmatch(r"\d+-\d+", score["event_id"])
    assert {"exact", "near", "solved", "points"} <= set(score)
    assert score["exact"] + score["near"] <= 4


async def test_guesses_over_the_socket(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    rid, ok = rnd["round_id"], _guess(rnd, 4, 4, 5, 6)
    async with connect(served.ws_url(player["token"])) as ws:
        await _greeted(ws)

        seen: list[dict[str, Any]] = []  # the score may arrive between two answers

        async def ask(frame: str) -> dict[str, Any]:
            await ws.send(frame)
            return await recv_until(
                ws, lambda m: m["type"] in ("accepted", "error", "pong"), seen=seen
            )

        def frame(**fields: Any) -> str:
            return orjson.dumps({"type": "guess", **fields}).decode()

        accepted = await ask(frame(round_id=rid, guess=ok, client_id="c_1"))
        assert accepted == {
            "type": "accepted",
            "client_id": "c_1",
            "job_id": accepted["job_id"],
            "seq": 0,
        }
        # the same client_id is the idempotency key: a resend is the same job
        again = await ask(frame(round_id=rid, guess=ok, client_id="c_1"))
        assert again["job_id"] == accepted["job_id"] and again["seq"] == 0
        assert (await ask(frame(round_id=rid, guess=ok[::-1], client_id="c_1")))[
            "error"
        ] == "idempotency_conflict"
        bad = await ask(frame(round_id=rid, guess=ok[:3], client_id="c_2"))
        assert bad["error"] == "invalid_guess" and bad["client_id"] == "c_2" and bad["detail"]
        assert (
            await ask(frame(round_id="RND_01ARZ3NDEKTSV4RRFFQ69G5FAV", guess=ok, client_id="c_3"))
        )["error"] == "not_found"
        assert (await ask(frame(guess=ok, client_id="c_4")))["error"] == "invalid_body"
        for junk in (
            "nope",
            "[]",
            "{}",
            '{"type":"hack"}',
            '{"type":"guess","round_id":"\\ud800"}',
            '{"type": "guess", "client_id": 5}',
            "\u0000",
        ):
            reply = await ask(junk)
            assert reply["type"] == "error" and reply["error"] == "invalid_body", junk
        assert (await ask('{"type":"ping"}'))["type"] == "pong"
        # and the accepted guess is scored, to this socket, once
        is_score = of_type("score", job_id=accepted["job_id"])
        if not any(is_score(m) for m in seen):
            await recv_until(ws, is_score, seen=seen)
        seen += [orjson.loads(f) for f in await drain(ws, 0.4)]
    scores = [m for m in seen if is_score(m)]
    assert len(scores) == 1 and scores[0]["seq"] == 0


async def test_a_throttled_socket_guess_gets_an_error_with_retry_after(served: Served) -> None:
    async with serve(served.config.with_(guess_rate=0.05, guess_burst=1)) as s:
        player = await s.new_player()
        rnd = await s.current_round()
        rid, ok = rnd["round_id"], _guess(rnd, 1, 2, 3, 4)
        async with connect(s.ws_url(player["token"])) as ws:
            await _greeted(ws)

            async def ask(client_id: str) -> dict[str, Any]:
                await ws.send(
                    orjson.dumps(
                        {"type": "guess", "round_id": rid, "guess": ok, "client_id": client_id}
                    ).decode()
                )
                return await recv_until(ws, lambda m: m["type"] in ("accepted", "error"))

            assert (await ask("c_1"))["seq"] == 0
            throttled = await ask("c_2")
            assert throttled["type"] == "error" and throttled["client_id"] == "c_2"
            assert throttled["error"] == "rate_limited" and "seq" not in throttled
            assert isinstance(throttled["retry_after"], int) and throttled["retry_after"] >= 1
            assert "c_2" not in throttled["detail"]
            assert (await ask("c_1"))["seq"] == 0  # a resend is a replay, never throttled


async def test_nobody_else_ever_sees_a_guess(served: Served) -> None:
    owner, other = await served.new_player("Owner"), await served.new_player("Other")
    rnd = await served.current_round()
    secret_looking = _guess(rnd, 7, 7, 0, 7)  # not a run of the palette: the round message
    needle = orjson.dumps(secret_looking).decode()[1:-1]  # lists the palette in order
    async with (
        connect(served.ws_url(owner["token"])) as mine,
        connect(served.ws_url(other["token"])) as theirs,
    ):
        await _greeted(mine)
        await _greeted(theirs)
        job = await submit(served, owner["token"], rnd["round_id"], secret_looking)
        await recv_until(mine, of_type("score", job_id=job))
        frames = await drain(theirs, 1.0)  # long enough for the coalesced progress
    assert frames, "the other player hears the field's progress"
    assert not any(needle in f or job in f for f in frames)
    messages = [orjson.loads(f) for f in frames]
    assert not [m for m in messages if m["type"] == "score"]
    rows = [
        p
        for m in messages
        if m["type"] == "progress"
        for p in m["players"]
        if p["player_id"] == owner["player_id"]
    ]
    assert rows and rows[-1]["scored"] == 1 and rows[-1]["name"] == "Owner"
    assert set(rows[-1]) == {
        "player_id",
        "name",
        "guesses",
        "scored",
        "best_exact",
        "best_near",
        "solved",
    }


async def test_resume_with_after_replays_the_missed_scores_once(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    tok, rid = player["token"], rnd["round_id"]
    async with connect(served.ws_url(tok)) as ws:
        await _greeted(ws)
        first = await submit(served, tok, rid, _guess(rnd, 1, 1, 1, 1))
        seen = (await recv_until(ws, of_type("score", job_id=first)))["event_id"]
    missed = [await submit(served, tok, rid, _guess(rnd, 2, 2, 2, i)) for i in range(3)]
    for job in missed:
        await wait_completed(served, tok, job)
    async with connect(served.ws_url(tok, after=seen)) as ws:
        greeting = [await recv(ws), await recv(ws)]
        replay = [await recv(ws) for _ in missed]
        rest = [orjson.loads(f) for f in await drain(ws, 0.5)]
    assert [m["type"] for m in greeting] == ["round", "leaderboard"]
    assert [m["type"] for m in replay] == ["score"] * 3
    # in completion order, which a worker scoring four at a time does not keep
    assert sorted(m["job_id"] for m in replay) == sorted(missed)
    assert sorted(m["seq"] for m in replay) == [1, 2, 3]
    assert all(_pos(m["event_id"]) > _pos(seen) for m in replay)
    scores = [m["job_id"] for m in replay + rest if m["type"] == "score"]
    assert sorted(scores) == sorted(missed)  # nothing twice, nothing from before `after`
    assert not [m for m in rest if m["type"] == "gap"]


async def test_gap_when_events_after_the_resume_point_were_trimmed(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    tok, rid = player["token"], rnd["round_id"]
    jobs = [await submit(served, tok, rid, _guess(rnd, 3, 3, 3, i)) for i in range(2)]
    for job in jobs:
        await wait_completed(served, tok, job)
    await valkey.xtrim("emq:{guesses}:events", maxlen=1, approximate=False)
    async with connect(served.ws_url(tok, after="1-0")) as ws:
        kinds = [(await recv(ws))["type"] for _ in range(3)]
        last = await recv(ws)
    assert kinds == ["round", "leaderboard", "gap"]
    # what is still retained is replayed after the gap: here, the last completion
    assert last["type"] == "score" and last["job_id"] in jobs
    async with connect(served.ws_url(tok, after="not-an-id")) as ws:
        assert [(await recv(ws))["type"] for _ in range(3)] == ["round", "leaderboard", "gap"]


async def test_the_token_may_travel_as_a_subprotocol_instead_of_in_the_url(
    served: Served,
) -> None:
    # What the page does: no token in the URL (servers and proxies log URLs), the token
    # offered as a subprotocol beside "codemojex", which is what the server answers.
    player = await served.new_player()
    bare = f"ws://127.0.0.1:{served.port}/ws"
    offer = [Subprotocol("codemojex"), Subprotocol(f"codemojex.token.{player['token']}")]
    async with connect(bare, subprotocols=offer) as ws:
        assert ws.subprotocol == "codemojex"  # never the token echoed back
        first, _ = await _greeted(ws)
        assert first["type"] == "round"
    for refused_offer in (
        [Subprotocol("codemojex"), Subprotocol("codemojex.token.nope")],  # a bad token
        [Subprotocol(f"codemojex.token.{player['token']}")],  # no "codemojex" to answer
    ):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(bare, subprotocols=refused_offer):
                pass
        assert refused.value.response.status_code == 403
    # the header's token wins over the URL's
    async with connect(served.ws_url("nope"), subprotocols=offer) as ws:
        assert (await recv(ws))["type"] == "round"
    # and "codemojex" alone, with ?token=, is answered too (a client may always offer it)
    async with connect(served.ws_url(player["token"]), subprotocols=offer[:1]) as ws:
        assert ws.subprotocol == "codemojex"


async def test_foreign_origins_and_bad_tokens_are_refused_before_the_upgrade(
    served: Served,
) -> None:
    player = await served.new_player()
    url = served.ws_url(player["token"])
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{served.port + 1}"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, origin=Origin(origin)):
                pass
        assert refused.value.response.status_code == 403
    for bad in (served.ws_url("nope"), f"ws://127.0.0.1:{served.port}/ws"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(bad):
                pass
        assert refused.value.response.status_code == 403
    for same in (Origin(f"http://127.0.0.1:{served.port}"), None):
        async with connect(url, origin=same) as ws:
            assert (await recv(ws))["type"] == "round"

    friendly = served.config.with_(allowed_origins=("https://friend.example",))
    async with serve(friendly) as s2:
        async with connect(
            s2.ws_url(player["token"]), origin=Origin("https://friend.example")
        ) as ws:
            assert (await recv(ws))["type"] == "round"
        with pytest.raises(InvalidStatus):
            async with connect(s2.ws_url(player["token"]), origin=Origin("https://foe.example")):
                pass


async def _closed_with(ws: Any) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(5):
            while True:
                await ws.recv()
    return closed.value.rcvd.code if closed.value.rcvd else None


async def test_binary_and_oversize_frames_close_the_socket(served: Served) -> None:
    player = await served.new_player()
    async with connect(served.ws_url(player["token"])) as ws:
        await _greeted(ws)
        await ws.send(b'{"type":"ping"}')
        assert await _closed_with(ws) == 1003
    async with connect(served.ws_url(player["token"]), max_size=None) as ws:
        await _greeted(ws)
        await ws.send('{"type":"ping","pad":"' + "x" * (16 * 1024) + '"}')
        assert await _closed_with(ws) == 1009


async def test_a_socket_that_falls_behind_is_closed_4008(served: Served) -> None:
    # A client that stops reading: once the kernel's buffers are full, what the hub writes
    # piles up in the server's transport, and past the hub's bound the socket is closed.
    player, other = await served.new_player(), await served.new_player("Reader")
    served.hub.outbox_limit = 64 * 1024
    pad = "x" * 60_000
    async with (
        connect(served.ws_url(player["token"]), max_queue=1, max_size=None) as stalled,
        connect(served.ws_url(other["token"]), max_size=None) as reading,
    ):
        await _greeted(stalled)
        await _greeted(reading)
        received = asyncio.create_task(drain(reading, 3.0))  # keeps up with every frame
        for i in range(400):  # 24 MB: more than loopback's buffers hold
            served.hub.broadcast({"type": "leaderboard", "players": [], "n": i, "pad": pad})
            await asyncio.sleep(0)
        assert await _closed_with(stalled) == 4008
        assert len(await received) >= 400, "a socket that reads is not evicted"
    assert "codemojex_sockets_evicted_total 1.0" in (await served.http.get("/metrics")).text


async def test_an_evicted_socket_costs_no_more_than_its_bound(served: Served) -> None:
    # The bound is on unsent bytes per socket: after eviction the hub writes nothing more
    # to it, whatever is broadcast.
    player = await served.new_player()
    served.hub.outbox_limit = 64 * 1024
    async with connect(served.ws_url(player["token"]), max_queue=1, max_size=None) as stalled:
        await _greeted(stalled)
        conn = next(iter(served.hub._conns))
        for i in range(400):
            served.hub.broadcast(
                {"type": "leaderboard", "players": [], "n": i, "pad": "x" * 60_000}
            )
        assert conn.evicted and conn not in served.hub._conns
        assert conn.sink.buffered() <= served.hub.outbox_limit + 61_000
        assert await _closed_with(stalled) == 4008


async def test_idle_sockets_get_pings(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("web.hub.PING_INTERVAL_S", 0.2)
    player = await served.new_player()
    async with connect(served.ws_url(player["token"])) as ws:
        await _greeted(ws)
        await recv_until(ws, of_type("ping"), timeout=3)


async def test_a_socket_without_valkey_closes_try_again_later(served: Served) -> None:
    player = await served.new_player()  # SQL is shared, so the token is good over there
    dead = served.config.with_(valkey_url=f"redis://127.0.0.1:{free_port()}/0")
    async with serve(dead) as s2, connect(s2.ws_url(player["token"])) as ws:
        assert await _closed_with(ws) == 1013


async def test_two_web_processes_both_deliver(served: Served) -> None:
    rnd = await served.current_round()
    a, b = await served.new_player("A"), await served.new_player("B")
    async with (
        serve(served.config) as other,
        connect(served.ws_url(a["token"])) as a1,
        connect(other.ws_url(a["token"])) as a2,
        connect(other.ws_url(b["token"])) as b2,
    ):
        for ws in (a1, a2, b2):
            await _greeted(ws)
        job_a = await submit(other, a["token"], rnd["round_id"], _guess(rnd, 5, 5, 5, 5))
        job_b = await submit(served, b["token"], rnd["round_id"], _guess(rnd, 6, 6, 6, 6))
        got_a1 = await recv_until(a1, of_type("score", job_id=job_a))
        got_a2 = await recv_until(a2, of_type("score", job_id=job_a))
        got_b2 = await recv_until(b2, of_type("score", job_id=job_b))
    assert got_a1 == got_a2
    assert got_b2["player_id"] == b["player_id"]


async def test_progress_is_coalesced(served: Served) -> None:
    watcher, masher = await served.new_player("Watcher"), await served.new_player("Masher")
    rnd = await served.current_round()
    async with connect(served.ws_url(watcher["token"])) as ws:
        await _greeted(ws)
        jobs = [
            await submit(served, masher["token"], rnd["round_id"], _guess(rnd, 0, 0, 0, i))
            for i in range(8)
            for _ in range(2)
        ]
        for job in jobs:
            await wait_completed(served, masher["token"], job)
        frames = await drain(ws, 0.6)
    progress = [m for m in map(orjson.loads, frames) if m["type"] == "progress"]
    mine = [p for m in progress for p in m["players"] if p["player_id"] == masher["player_id"]]
    assert mine[-1]["guesses"] == mine[-1]["scored"] == 16
    # 16 guesses scored, far fewer messages: at most ~4 a second while it lasted
    assert 1 <= len(progress) < 16


async def test_a_solve_updates_the_leaderboard(served: Served, valkey: redis.asyncio.Redis) -> None:
    player = await served.new_player("Solver")
    rnd = await served.current_round()
    secret = await secret_of(valkey, rnd["round_id"])
    async with connect(served.ws_url(player["token"])) as ws:
        await _greeted(ws)
        job = await submit(served, player["token"], rnd["round_id"], secret)
        score = await recv_until(ws, of_type("score", job_id=job))
        board = await recv_until(
            ws,
            lambda m: (
                m["type"] == "leaderboard"
                and any(p["player_id"] == player["player_id"] for p in m["players"])
            ),
        )
    assert score["solved"] and score["exact"] == 4 and score["points"] == 110
    row = next(p for p in board["players"] if p["player_id"] == player["player_id"])
    assert row["points"] >= 110 and row["solved_rounds"] >= 1
