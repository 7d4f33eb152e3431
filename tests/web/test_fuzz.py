"""Hypothesis throws malformed bodies, headers and socket frames at a running server.

Only contract answers may come back — 2xx for the odd valid input, else a 4xx with the
error body; on the socket an ``error`` message or a close with 1003/1007/1008/1009 — and
the server must still serve afterwards. The server runs in a thread of its own (its own
event loop), so the Hypothesis tests can be plain synchronous functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from echomq.server import EmbeddedValkey
from tests.web.conftest import make_config, served_in_thread

ERROR_CODES = {
    "invalid_body",
    "invalid_guess",
    "unauthorized",
    "forbidden",
    "not_found",
    "round_closed",
    "body_too_large",
    "method_not_allowed",
    "lane_full",
    "idempotency_conflict",
    "conflict",
    "rate_limited",
}
FUZZ = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass
class Running:
    http: httpx.Client
    port: int
    token: str
    round_id: str
    palette: list[str]


@pytest.fixture(scope="module")
def running(
    private_valkey: EmbeddedValkey, sql_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    config = make_config(private_valkey.url, sql_url, tmp_path_factory.mktemp("fuzz"))
    with (
        served_in_thread(config, "fuzz-server") as port,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http,
    ):
        player = http.post("/api/players", json={"name": "Fuzzer"}).json()
        rnd = http.get("/api/round").json()
        yield Running(http, port, player["token"], rnd["round_id"], rnd["palette"])
        # ... and it still serves, properly
        assert http.get("/healthz").status_code == 200
        fresh = http.post("/api/players", json={"name": "After"}).json()
        resp = http.post(
            "/api/guesses",
            json={"round_id": rnd["round_id"], "guess": rnd["palette"][:4]},
            headers={"Authorization": f"Bearer {fresh['token']}"},
        )
        assert resp.status_code == 202


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=15,
)
tricky = st.sampled_from(
    [
        b'{"name":"\\ud800"}',
        b'{"name":"\\udfff\\ud800"}',
        b'{"round_id":"\\ud83d","guess":[]}',
        b"\xc3\x28",
        b"\xed\xa0\x80",
        b"\x00",
        b"{}" * 3,
        b"[" * 3000,
        b'{"a":' * 2000,
        b"1e999999",
        b"-",
        b'{"name":1e400}',
        b'{"name":18446744073709551616}',
        b"\xef\xbb\xbf{}",
    ]
)
# What HTTP/1.1 can carry in a header value at all (the client refuses the rest): latin-1
# without controls, no leading or trailing whitespace.
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60
).map(str.strip)


def _bodies(fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=200),
        tricky,
        json_values.map(lambda v: json.dumps(v).encode()),
        fields.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
        st.integers(16 * 1024 + 1, 40 * 1024).map(lambda n: b" " * n),
    )


def _headers(draw_auth: st.SearchStrategy[bytes | None]) -> st.SearchStrategy[dict[bytes, bytes]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "Content-Type": st.sampled_from(
                [
                    b"application/json",
                    b"text/plain",
                    b"x/y; a=b",
                    b"application/json; charset=latin-1",
                ]
            ),
            "Authorization": draw_auth,
            "Idempotency-Key": header_text.map(lambda t: t.encode("latin-1")),
            "X-Fuzz": header_text.map(lambda t: t.encode("latin-1")),
            "Accept": header_text.map(lambda t: t.encode("latin-1")),
        },
    ).map(lambda h: {k.encode(): v for k, v in h.items() if v is not None})


def _assert_contract_answer(resp: httpx.Response, ok: set[int]) -> None:
    if resp.status_code in ok:
        return
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:200])
    body = resp.json()
    assert body["error"] in ERROR_CODES and isinstance(body["detail"], str), body


@FUZZ
@given(
    body=_bodies(st.fixed_dictionaries({"name": json_values | st.text(max_size=40)})),
    headers=_headers(header_text.map(lambda t: t.encode("latin-1")) | st.none()),
)
@pytest.mark.slow
def test_fuzzed_joins_get_only_contract_answers(
    running: Running, body: bytes, headers: dict[bytes, bytes]
) -> None:
    resp = running.http.post("/api/players", content=body, headers=headers)
    _assert_contract_answer(resp, {201})


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_fuzzed_guesses_get_only_contract_answers(running: Running, data: st.DataObject) -> None:
    palette = st.sampled_from(running.palette)
    guess = st.one_of(
        st.lists(palette, min_size=4, max_size=4), st.lists(palette, max_size=6), json_values
    )
    round_id = st.one_of(st.just(running.round_id), st.text(max_size=30), json_values)
    fields = st.fixed_dictionaries(
        {}, optional={"round_id": round_id, "guess": guess, "extra": json_values}
    )
    auth = st.one_of(
        st.just(f"Bearer {running.token}".encode()),
        header_text.map(lambda t: ("Bearer " + t).strip().encode("latin-1")),
        st.none(),
    )
    body = data.draw(_bodies(fields))
    headers = data.draw(_headers(auth))
    resp = running.http.post("/api/guesses", content=body, headers=headers)
    _assert_contract_answer(resp, {202})


ALLOWED_CLOSES = {1003, 1007, 1008, 1009}


@FUZZ
@given(data=st.data())
@pytest.mark.slow
def test_fuzzed_socket_frames_get_errors_or_allowed_closes(
    running: Running, data: st.DataObject
) -> None:
    guessish = st.fixed_dictionaries(
        {"type": st.sampled_from(["guess", "ping", "x"])},
        optional={
            "round_id": st.just(running.round_id) | json_values,
            "guess": st.lists(st.sampled_from(running.palette), max_size=5) | json_values,
            "client_id": st.text(max_size=140) | json_values,
        },
    ).map(lambda v: json.dumps(v, ensure_ascii=False))
    frame: str | bytes = data.draw(
        st.one_of(
            st.text(max_size=200),
            guessish,
            json_values.map(json.dumps),
            st.binary(min_size=1, max_size=50),
            st.integers(16 * 1024 + 1, 20 * 1024).map(lambda n: "x" * n),
            st.sampled_from(['{"type":"guess","round_id":"\\ud800"}', "\u0000", "[]" * 500]),
        )
    )
    url = f"ws://127.0.0.1:{running.port}/ws?token={running.token}"
    with connect(url, max_size=None, open_timeout=5) as ws:
        ws.send(frame)
        try:
            while True:
                raw = ws.recv(timeout=5)
                assert isinstance(raw, str)
                msg = orjson.loads(raw)
                if msg["type"] in ("error", "accepted", "pong"):
                    if msg["type"] == "error":
                        assert msg["error"] in ERROR_CODES | {"unavailable"}
                    break
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code in ALLOWED_CLOSES, closed
