"""The HTTP API against a real uvicorn: every endpoint, every error status, the check order."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio

import echomq
from echomq.server import EmbeddedValkey
from harness.helpers import free_port
from tests.web.conftest import (
    ADMIN_TOKEN,
    Served,
    assert_error,
    bearer,
    make_config,
    serve,
    wait_scored,
)

BIG = 16 * 1024 + 1


async def _guess(s: Served, token: str, body: Any, **headers: str) -> Any:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return await s.http.post(
        "/api/guesses",
        content=content,
        headers={**bearer(token), "Content-Type": "application/json", **headers},
    )


def _valid(rnd: dict[str, Any]) -> list[str]:
    p = rnd["palette"]
    return [p[0], p[1], p[1], p[2]]


# -- players -----------------------------------------------------------------------------------


async def test_join_answers_201_with_id_name_and_token(served: Served) -> None:
    resp = await served.http.post("/api/players", json={"name": "Grace 🚀"})
    assert resp.status_code == 201
    body = resp.json()
    assert body["name"] == "Grace 🚀"
    assert body["player_id"].startswith("PLR_") and len(body["player_id"]) == 30
    assert isinstance(body["token"], str) and len(body["token"]) >= 20


async def test_bad_names_are_invalid_body(served: Served) -> None:
    for body in (
        {},
        {"name": ""},
        {"name": "x" * 33},
        {"name": 42},
        {"name": None},
        {"name": ["Ada"]},
        {"name": "Ada\u0000"},
        {"name": "A\u200bda"},
        {"name": "   "},
        {"name": "A\u202eda"},
        {"name": "Ada\u2028"},
    ):
        assert_error(await served.http.post("/api/players", json=body), 400, "invalid_body")


async def test_bodies_that_are_not_a_json_object_are_invalid_body(served: Served) -> None:
    for raw in (
        b'{"name":"\\ud800"}',
        b'{"name":"\\udc00x"}',
        b"\xff\xfe",
        b"{",
        b"",
        b"null",
        b"[]",
        b'"Ada"',
        b"{'name': 'Ada'}",
        b'{"name":"Ada"} trailing',
        b"[" * 5000 + b"]" * 5000,
        b'{"name":"Ada","name":' + b"9" * 400 + b"}",
    ):
        resp = await served.http.post("/api/players", content=raw)
        assert_error(resp, 400, "invalid_body")


async def test_body_over_16_kib_is_413_whether_declared_or_streamed(served: Served) -> None:
    huge = orjson.dumps({"name": "x" * BIG})
    assert_error(await served.http.post("/api/players", content=huge), 413, "body_too_large")

    async def chunks() -> Any:  # no Content-Length: the bytes actually read count
        for _ in range(5):
            yield b" " * 4096

    resp = await served.http.post("/api/players", content=chunks())
    assert_error(resp, 413, "body_too_large")
    # exactly at the cap is fine (and then judged on its shape)
    at_cap = b'{"name":"Ada"}'.ljust(16 * 1024, b" ")
    assert (await served.http.post("/api/players", content=at_cap)).status_code == 201


# -- rounds ------------------------------------------------------------------------------------


async def test_current_round_and_round_by_id(served: Served) -> None:
    rnd = await served.current_round()
    assert rnd["state"] == "open" and rnd["round_id"].startswith("RND_")
    assert rnd["length"] == 4 and len(rnd["palette"]) == 8
    assert rnd["opens_at"] < rnd["closes_at"]
    assert "secret" not in rnd
    resp = await served.http.get(f"/api/rounds/{rnd['round_id']}")
    assert resp.status_code == 200
    assert resp.json()["round_id"] == rnd["round_id"] and "secret" not in resp.json()
    assert_error(
        await served.http.get("/api/rounds/RND_01ARZ3NDEKTSV4RRFFQ69G5FAV"), 404, "not_found"
    )
    assert_error(await served.http.get("/api/rounds/whatever"), 404, "not_found")


# -- guesses -----------------------------------------------------------------------------------


async def test_guesses_are_accepted_with_consecutive_seq(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    seqs = []
    for _ in range(3):
        resp = await _guess(
            served, player["token"], {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["job_id"].startswith("JOB_")
        seqs.append(resp.json()["seq"])
    assert seqs == [0, 1, 2]


async def test_guess_errors(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    tok, rid, ok = player["token"], rnd["round_id"], _valid(rnd)

    resp = await served.http.post("/api/guesses", json={"round_id": rid, "guess": ok})
    assert_error(resp, 401, "unauthorized")
    assert_error(
        await _guess(served, "not-a-token", {"round_id": rid, "guess": ok}), 401, "unauthorized"
    )
    resp = await served.http.post(
        "/api/guesses",
        json={"round_id": rid, "guess": ok},
        headers={"Authorization": f"Basic {tok}"},
    )
    assert_error(resp, 401, "unauthorized")
    assert_error(await _guess(served, tok, b"not json"), 400, "invalid_body")
    assert_error(await _guess(served, tok, {"guess": ok}), 400, "invalid_body")
    assert_error(await _guess(served, tok, {"round_id": 7, "guess": ok}), 400, "invalid_body")
    assert_error(await _guess(served, tok, {"round_id": rid}), 400, "invalid_body")
    for bad in (
        ok[:3],
        [*ok, ok[0]],
        ["A", "B", "C", "D"],
        "🍎🍎🍎🍎",
        None,
        [1, 2, 3, 4],
        [ok[0] + "\ufe0f", *ok[1:]],
    ):
        assert_error(
            await _guess(served, tok, {"round_id": rid, "guess": bad}), 400, "invalid_guess"
        )
    assert_error(
        await _guess(served, tok, {"round_id": "RND_01ARZ3NDEKTSV4RRFFQ69G5FAV", "guess": ok}),
        404,
        "not_found",
    )
    assert_error(
        await _guess(served, tok, {"round_id": rid, "guess": ok}, **{"Idempotency-Key": "x" * 129}),
        400,
        "invalid_body",
    )
    # nothing above took a sequence number
    resp = await _guess(served, tok, {"round_id": rid, "guess": ok})
    assert resp.status_code == 202 and resp.json()["seq"] == 0


async def test_checks_run_in_the_contract_order(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    tok = player["token"]
    huge_bad = b"{" + b"x" * BIG
    unknown = "RND_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    # 401 before 413
    assert_error(await _guess(served, "bad", huge_bad), 401, "unauthorized")
    # 413 before 400
    assert_error(await _guess(served, tok, huge_bad), 413, "body_too_large")
    # 400 before 404 (a bad guess for an unknown round)
    assert_error(
        await _guess(served, tok, {"round_id": unknown, "guess": ["x"]}), 400, "invalid_guess"
    )
    # 404 before 409: an unknown round with a reused key is still just unknown
    key = {"Idempotency-Key": f"order-{time.time_ns()}"}
    assert (
        await _guess(served, tok, {"round_id": rnd["round_id"], "guess": _valid(rnd)}, **key)
    ).status_code == 202
    assert_error(
        await _guess(served, tok, {"round_id": unknown, "guess": _valid(rnd)}, **key),
        404,
        "not_found",
    )


async def test_idempotent_replay_returns_the_same_job_and_a_changed_body_conflicts(
    served: Served,
) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
    key = {"Idempotency-Key": "c_0123456789abcdef"}
    first = await _guess(served, player["token"], body, **key)
    again = await _guess(served, player["token"], body, **key)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    other = {"round_id": rnd["round_id"], "guess": list(reversed(_valid(rnd)))}
    assert_error(await _guess(served, player["token"], other, **key), 409, "idempotency_conflict")
    # the same key is per player: another player may use it freely
    someone = await served.new_player("Bob")
    resp = await _guess(served, someone["token"], other, **key)
    assert resp.status_code == 202 and resp.json()["job_id"] != first.json()["job_id"]
    # and nothing was enqueued twice: the next guess is seq 1
    resp = await _guess(served, player["token"], body)
    assert resp.json()["seq"] == 1


async def test_a_guess_is_visible_to_its_owner_only(served: Served, worker: Any) -> None:
    owner, other = await served.new_player("Owner"), await served.new_player("Other")
    rnd = await served.current_round()
    job = (
        await _guess(served, owner["token"], {"round_id": rnd["round_id"], "guess": _valid(rnd)})
    ).json()["job_id"]
    view = await wait_scored(served, owner["token"], job)
    assert view["job_id"] == job and view["round_id"] == rnd["round_id"]
    assert view["seq"] == 0 and view["guess"] == _valid(rnd)
    # the score is in SQL a moment before the job completes in Valkey
    assert view["state"] in ("active", "completed") and view["attempts"] == 1
    assert set(view["score"]) == {"exact", "near", "solved", "points"}
    assert_error(
        await served.http.get(f"/api/guesses/{job}", headers=bearer(other["token"])),
        403,
        "forbidden",
    )
    assert_error(await served.http.get(f"/api/guesses/{job}"), 401, "unauthorized")
    assert_error(
        await served.http.get(
            "/api/guesses/JOB_01ARZ3NDEKTSV4RRFFQ69G5FAV", headers=bearer(owner["token"])
        ),
        404,
        "not_found",
    )
    assert_error(
        await served.http.get("/api/guesses/nope", headers=bearer(owner["token"])), 404, "not_found"
    )


async def test_listing_own_guesses_of_a_round(served: Served) -> None:
    player, other = await served.new_player(), await served.new_player()
    rnd = await served.current_round()
    jobs = [
        (
            await _guess(
                served, player["token"], {"round_id": rnd["round_id"], "guess": _valid(rnd)}
            )
        ).json()["job_id"]
        for _ in range(2)
    ]
    await _guess(served, other["token"], {"round_id": rnd["round_id"], "guess": _valid(rnd)})
    resp = await served.http.get(
        "/api/guesses", params={"round_id": rnd["round_id"]}, headers=bearer(player["token"])
    )
    assert resp.status_code == 200
    assert [g["job_id"] for g in resp.json()["guesses"]] == jobs
    assert [g["seq"] for g in resp.json()["guesses"]] == [0, 1]
    assert_error(
        await served.http.get("/api/guesses", headers=bearer(player["token"])), 400, "invalid_body"
    )
    assert_error(
        await served.http.get(
            "/api/guesses", params={"round_id": "RND_x"}, headers=bearer(player["token"])
        ),
        404,
        "not_found",
    )
    assert_error(
        await served.http.get("/api/guesses", params={"round_id": rnd["round_id"]}),
        401,
        "unauthorized",
    )


async def test_listing_own_guesses_reads_only_the_players_own_jobs(
    served: Served, private_valkey: EmbeddedValkey
) -> None:
    # 200 other players' guesses held active by a claim: the listing must not look at them
    # (it once fetched every active and scheduled job, one round trip each).
    rnd = await served.current_round()
    body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
    others = [await served.new_player(f"P{i}") for i in range(200)]
    for other in others:
        assert (await _guess(served, other["token"], body)).status_code == 202
    player = await served.new_player("Mine")
    mine = (await _guess(served, player["token"], body)).json()["job_id"]
    conn = redis.asyncio.Redis.from_url(private_valkey.url)
    try:
        queue = echomq.Queue(conn, "guesses")
        held = await queue.lanes.claim_many("test-holder", 60_000, 150)
        assert len(held.claims) == 150
        await conn.config_resetstat()
        resp = await served.http.get(
            "/api/guesses", params={"round_id": rnd["round_id"]}, headers=bearer(player["token"])
        )
        stats = await conn.info("commandstats")
    finally:
        await conn.aclose()
    assert resp.status_code == 200
    assert [g["job_id"] for g in resp.json()["guesses"]] == [mine]
    # a handful of commands for the auth and the player's one guess, not one per job
    calls = sum(int(v["calls"]) for v in stats.values())
    assert calls < 20, stats


async def test_leaderboard(served: Served) -> None:
    rnd = await served.current_round()
    resp = await served.http.get("/api/leaderboard")
    assert resp.status_code == 200 and isinstance(resp.json()["players"], list)
    resp = await served.http.get("/api/leaderboard", params={"round_id": rnd["round_id"]})
    assert resp.status_code == 200 and isinstance(resp.json()["players"], list)
    assert_error(
        await served.http.get(
            "/api/leaderboard", params={"round_id": "RND_01ARZ3NDEKTSV4RRFFQ69G5FAV"}
        ),
        404,
        "not_found",
    )


async def test_lane_full_is_429_with_retry_after(config: Any) -> None:
    # No worker runs in this test: accepted guesses stay pending.
    async with serve(config.with_(lane_cap=2)) as s:
        player = await s.new_player()
        rnd = await s.current_round()
        body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        for _ in range(2):
            assert (await _guess(s, player["token"], body)).status_code == 202
        resp = await _guess(s, player["token"], body)
        assert_error(resp, 429, "lane_full")
        assert int(resp.headers["Retry-After"]) >= 1
        # other players have lanes of their own
        assert (await _guess(s, (await s.new_player())["token"], body)).status_code == 202


async def test_rate_limited_is_429_with_retry_after_and_takes_no_seq(config: Any) -> None:
    async with serve(config.with_(guess_rate=0.05, guess_burst=2)) as s:
        player, other = await s.new_player(), await s.new_player("Bob")
        rnd = await s.current_round()
        body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        for _ in range(2):
            assert (await _guess(s, player["token"], body)).status_code == 202
        resp = await _guess(s, player["token"], body, **{"Idempotency-Key": "too-fast"})
        err = assert_error(resp, 429, "rate_limited")
        assert int(resp.headers["Retry-After"]) >= 1  # whole seconds (20 s for a token here)
        assert "too-fast" not in err["detail"]
        # checks in the contract's order: a bad body is still 400, an unknown round 404
        assert_error(
            await _guess(s, player["token"], {"round_id": rnd["round_id"], "guess": ["x"]}),
            400,
            "invalid_guess",
        )
        assert_error(
            await _guess(s, player["token"], {**body, "round_id": "RND_" + "0" * 26}),
            404,
            "not_found",
        )
        # the limit is per player, and the refusal took no number
        assert (await _guess(s, other["token"], body)).json()["seq"] == 0
        resp = await s.http.get(
            "/api/guesses", params={"round_id": rnd["round_id"]}, headers=bearer(player["token"])
        )
        assert [g["seq"] for g in resp.json()["guesses"]] == [0, 1]
    async with serve(config.with_(guess_rate=0)) as s:  # 0 = off
        player = await s.new_player()
        rnd = await s.current_round()
        body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        for _ in range(30):
            assert (await _guess(s, player["token"], body)).status_code == 202


async def test_fifo_keeps_the_pending_cap_and_the_rate_limit(config: Any) -> None:
    async with serve(config.with_(fifo=True, lane_cap=2, guess_rate=0.05, guess_burst=3)) as s:
        player, other = await s.new_player(), await s.new_player("Bob")
        rnd = await s.current_round()
        body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        for _ in range(2):
            assert (await _guess(s, player["token"], body)).status_code == 202
        assert_error(await _guess(s, player["token"], body), 429, "lane_full")
        for _ in range(2):
            assert (await _guess(s, other["token"], body)).status_code == 202
        assert_error(await _guess(s, other["token"], body), 429, "lane_full")
    async with serve(config.with_(fifo=True, guess_rate=0.05, guess_burst=3)) as s:
        player = await s.new_player()
        rnd = await s.current_round()
        body = {"round_id": rnd["round_id"], "guess": _valid(rnd)}
        for _ in range(3):
            assert (await _guess(s, player["token"], body)).status_code == 202
        assert_error(await _guess(s, player["token"], body), 429, "rate_limited")


# -- the rest of the surface -----------------------------------------------------------------


async def test_unknown_paths_and_methods_answer_the_error_body(served: Served) -> None:
    assert_error(await served.http.get("/nope"), 404, "not_found")
    assert_error(await served.http.get("/api/nope"), 404, "not_found")
    assert_error(await served.http.get("/static/nope.js"), 404, "not_found")
    resp = await served.http.delete("/api/round")
    assert_error(resp, 405, "method_not_allowed")
    assert "GET" in resp.headers["Allow"]
    resp = await served.http.put("/api/guesses")
    assert_error(resp, 405, "method_not_allowed")
    assert {"GET", "POST"} <= {m.strip() for m in resp.headers["Allow"].split(",")}
    assert_error(await served.http.get("/api/players"), 405, "method_not_allowed")


async def test_pages_static_files_and_security_headers(served: Served) -> None:
    for path, kind in (
        ("/", "text/html"),
        ("/admin", "text/html"),
        ("/static/app.js", "javascript"),
        ("/static/style.css", "text/css"),
    ):
        resp = await served.http.get(path)
        assert resp.status_code == 200, path
        assert kind in resp.headers["content-type"]
        assert "default-src 'self'" in resp.headers["content-security-policy"]
        assert resp.headers["x-content-type-options"] == "nosniff"
    resp = await served.http.get("/api/round")
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert resp.headers["cache-control"] == "no-store"
    assert "<html" in (await served.http.get("/")).text.lower()


async def test_healthz_metrics_and_openapi(served: Served) -> None:
    resp = await served.http.get("/healthz")
    assert resp.status_code == 200 and resp.json()["valkey"] and resp.json()["sql"]

    player = await served.new_player()
    await _guess(served, player["token"], b"{")
    text = (await served.http.get("/metrics")).text
    for name in (
        "codemojex_submissions_total",
        "codemojex_scores_pushed_total",
        "codemojex_score_latency_seconds_bucket",
        'codemojex_queue_jobs{state="pending"}',
        "codemojex_stale_completions_refused_total",
        "codemojex_reclaims_total",
    ):
        assert name in text, name
    assert 'codemojex_submissions_total{outcome="invalid_body"}' in text

    doc = (await served.http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.1")
    for path, methods in {
        "/api/players": {"post"},
        "/api/round": {"get"},
        "/api/rounds/{round_id}": {"get"},
        "/api/guesses": {"get", "post"},
        "/api/guesses/{job_id}": {"get"},
        "/api/leaderboard": {"get"},
        "/healthz": {"get"},
        "/metrics": {"get"},
        "/openapi.json": {"get"},
        "/api/admin/workers": {"get", "post"},
        "/api/admin/workers/{worker_id}/kill": {"post"},
        "/api/admin/queue": {"get"},
        "/api/admin/dead": {"get"},
        "/api/admin/dead/{job_id}/retry": {"post"},
        "/api/admin/dead/{job_id}": {"delete"},
    }.items():
        assert methods <= set(doc["paths"][path]), path
    post = doc["paths"]["/api/guesses"]["post"]["responses"]
    assert {"202", "400", "401", "404", "409", "413", "429", "503"} <= set(post)
    codes = doc["components"]["schemas"]["Error"]["properties"]["error"]["enum"]
    assert "lane_full" in codes and "rate_limited" in codes and "body_too_large" in codes
    too_many = doc["components"]["responses"][post["429"]["$ref"].rsplit("/", 1)[1]]
    assert "rate_limited" in too_many["description"] and "Retry-After" in too_many["headers"]


async def test_admin_api_wants_the_admin_token(served: Served) -> None:
    player = await served.new_player()
    refused: list[dict[bytes, bytes]] = [
        {},
        {b"Authorization": f"Bearer {player['token']}".encode()},
        {b"Authorization": f"Bearer {ADMIN_TOKEN}x".encode()},
        {b"Authorization": ADMIN_TOKEN.encode()},
        {b"Authorization": b"Bearer \xe9\xe9"},
    ]
    for headers in refused:
        assert_error(
            await served.http.get("/api/admin/queue", headers=headers), 401, "unauthorized"
        )
    resp = await served.http.get("/api/admin/queue", headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 200 and "counters" in resp.json()


# -- backend down ------------------------------------------------------------------------------


async def test_valkey_unreachable_is_503_with_retry_after_at_once(
    sql_url: str, tmp_path: Path
) -> None:
    dead = make_config(f"redis://127.0.0.1:{free_port()}/0", sql_url, tmp_path)
    async with serve(dead) as s:
        for method, path, body in (
            ("POST", "/api/players", b'{"name": "Ada"}'),
            ("GET", "/api/round", None),
            ("GET", "/healthz", None),
        ):
            t0 = time.monotonic()
            resp = await s.http.request(method, path, content=body)
            assert time.monotonic() - t0 < 3, path
            assert_error(resp, 503, "unavailable")
            assert int(resp.headers["Retry-After"]) >= 1
        # still validates what it can without the backend: a malformed body is still 400
        assert_error(await s.http.post("/api/players", content=b"{"), 400, "invalid_body")
        assert (await s.http.get("/metrics")).status_code == 200


async def test_sql_unreachable_is_503(private_valkey: EmbeddedValkey, tmp_path: Path) -> None:
    broken = make_config(
        private_valkey.url, f"sqlite+aiosqlite:///{tmp_path}/no/such/dir.db", tmp_path
    )
    async with serve(broken) as s:
        for method, path, body in (
            ("POST", "/api/players", b'{"name": "Ada"}'),
            ("GET", "/api/leaderboard", None),
            ("GET", "/api/guesses/JOB_01ARZ3NDEKTSV4RRFFQ69G5FAV", None),
            ("GET", "/healthz", None),
        ):
            resp = await s.http.request(method, path, content=body, headers=bearer("t"))
            assert_error(resp, 503, "unavailable")
            assert "Retry-After" in resp.headers


async def test_a_hung_valkey_is_503_within_the_request_deadline(
    sql_url: str, tmp_path: Path
) -> None:
    server = EmbeddedValkey(tmp_path / "hung", appendfsync="no")
    server.start()
    try:
        async with serve(make_config(server.url, sql_url, tmp_path)) as s:
            assert (await s.current_round())["state"] == "open"
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
            try:
                t0 = time.monotonic()
                resp = await s.http.get("/api/round")
                assert time.monotonic() - t0 < 7
                assert_error(resp, 503, "unavailable")
                assert "Retry-After" in resp.headers
            finally:
                os.kill(server.pid, signal.SIGCONT)
    finally:
        server.stop()
