"""Real ``codemojex web`` processes behind Debian's real nginx, with the config compose
ships (deploy/nginx/nginx.conf, run by :mod:`harness.nginx` with only the loopback lines
substituted): the game goes through, the player's address reaches the app, and what nginx
refuses (a flood from one address, a slow head or body) never reaches it and is answered in
the contract's JSON; a replica's own 503 is passed on, not retried on the other.

Clients speak from loopback addresses of their own (127.0.0.0/8 is all this machine's), so
nginx sees each as a different player's address; nginx reaches the web processes from
127.0.0.1, the one proxy they trust.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from codemojex.config import Config
from harness.helpers import free_port, slow_request, sql_write_locked
from harness.nginx import SHIPPED, Nginx, Response, pipelined, require_nginx, running_nginx
from harness.running import WebProcess, wait_until, web_processes
from web.connections import HEAD_TIMEOUT_S
from web.door.admit import PLAYER_IN_FLIGHT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

PROXY = "127.0.0.1"  # nginx's address toward the web processes
TRUST_NGINX = ("--forwarded-allow-ips", PROXY)


class Web(WebProcess):
    def metrics(self) -> str:
        """This process's /metrics, read from it directly (through nginx it is 404)."""
        return httpx.get(f"{self.base}/metrics", trust_env=False, timeout=5).text

    def requests(self, route: str) -> float:
        """``codemojex_http_requests`` of ``route``, every method and status."""
        pattern = (
            rf'^codemojex_http_requests_total\{{[^}}]*route="{re.escape(route)}"[^}}]*\}} (\S+)'
        )
        return sum(float(v) for v in re.findall(pattern, self.metrics(), re.MULTILINE))

    def door_working(self) -> float:
        m = re.search(
            r'^codemojex_door_requests_now\{state="working"\} (\S+)', self.metrics(), re.MULTILINE
        )
        return float(m[1]) if m else 0.0


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Callable[..., Web]]:
    require_nginx()
    with web_processes(tmp_path, Web) as start:
        yield start


@pytest.fixture
def start_nginx(tmp_path: Path) -> Iterator[Callable[..., Nginx]]:
    """``start_nginx(*webs)`` (a web process or a bare port each): the shipped config in
    front of them, every nginx stopped at exit."""
    with contextlib.ExitStack() as stack:
        started: list[Nginx] = []

        def start(*webs: Web | int) -> Nginx:
            ports = [w if isinstance(w, int) else w.port for w in webs]
            prefix = tmp_path / f"nginx-{len(started)}"
            prefix.mkdir()
            nginx = stack.enter_context(running_nginx([(PROXY, p) for p in ports], prefix))
            started.append(nginx)
            return nginx

        yield start


def client(source: str) -> httpx.Client:
    """An HTTP client whose connections come from ``source``, a loopback address."""
    return httpx.Client(
        transport=httpx.HTTPTransport(local_address=source), trust_env=False, timeout=10
    )


def shipped_text() -> str:
    """The shipped config without its comments."""
    return re.sub(r"#[^\n]*", "", SHIPPED.read_text(encoding="utf-8"))


def directives(name: str) -> list[str]:
    """The values of ``name`` in the shipped config, in order (comments aside)."""
    found = re.findall(rf"^\s*{name}\s+([^;]+);", shipped_text(), re.MULTILINE)
    return [str(v).strip() for v in found]


def directive(name: str) -> str:
    """The value of ``name`` in the shipped config (once, comments aside)."""
    (value,) = directives(name)
    return value


def limit_req(zone: str) -> str:
    """The ``limit_req`` of ``zone`` in the shipped config (once)."""
    (value,) = [v for v in directives("limit_req") if v.startswith(f"zone={zone} ")]
    return value


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", value)
    assert m is not None, value
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m[2]]


# -- the game through nginx ----------------------------------------------------------------------


def test_guesses_and_the_websocket_go_through_nginx(
    start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    web = start_web(*TRUST_NGINX)
    nginx = start_nginx(web)
    with client("127.0.0.2") as http:
        player = http.post(f"{nginx.base}/api/players", json={"name": "Via"})
        assert player.status_code == 201, player.text
        token = player.json()["token"]
        rnd = http.get(f"{nginx.base}/api/round").json()
        guess = [rnd["palette"][0]] * rnd["length"]
        auth = {"Authorization": f"Bearer {token}"}
        posted = http.post(
            f"{nginx.base}/api/guesses",
            json={"round_id": rnd["round_id"], "guess": guess},
            headers=auth,
        )
        assert posted.status_code == 202, posted.text

    async def play() -> list[dict[str, Any]]:
        url = f"ws://127.0.0.1:{nginx.port}/ws?token={token}"
        async with websockets.connect(url, open_timeout=10) as ws:
            seen = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(2)]
            frame = {
                "type": "guess",
                "round_id": rnd["round_id"],
                "guess": guess,
                "client_id": "c1",
            }
            await ws.send(json.dumps(frame))
            while seen[-1].get("type") not in ("accepted", "error"):
                seen.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            return seen

    seen = asyncio.run(play())
    assert [m["type"] for m in seen[:2]] == ["round", "leaderboard"]
    assert seen[-1]["type"] == "accepted" and seen[-1]["client_id"] == "c1", seen[-1]


def test_the_players_address_reaches_the_app_and_a_client_cannot_pick_it(
    start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    """New players are limited per client address (a burst of 2 here): behind nginx each
    address has its own bucket, and an X-Forwarded-For a client writes changes nothing."""
    web = start_web(
        *TRUST_NGINX, env={"CODEMOJEX_PLAYER_BURST": "2", "CODEMOJEX_PLAYER_RATE": "0.01"}
    )
    nginx = start_nginx(web)
    url = f"{nginx.base}/api/players"
    with client("127.0.0.2") as alice, client("127.0.0.3") as bob:
        assert [alice.post(url, json={"name": "A"}).status_code for _ in range(3)] == [
            201,
            201,
            429,
        ]
        forged = alice.post(url, json={"name": "A"}, headers={"X-Forwarded-For": "203.0.113.9"})
        assert forged.status_code == 429, forged.text
        assert bob.post(url, json={"name": "B"}).status_code == 201


# -- what nginx refuses itself -------------------------------------------------------------------


def test_a_flood_from_one_address_is_refused_by_nginx_and_never_reaches_the_app(
    start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    """Past the per-address burst, nginx answers 503 overloaded itself. In rounds of 8
    connections from one address, each pipelining 1,000 requests (nginx's keep-alive
    maximum): the app's cheapest answer (a 404) with an /api/round every 50th, until nginx
    has refused some /api/round; what nginx refused, the app never counted. Another
    address is served after. (nginx's own answers, such as /metrics' 404, come before
    limit_req is consulted and cannot fill the bucket: the flood's requests reach the
    app until the burst is spent, as fast as it answers them. On a busy machine that takes
    more rounds.)"""
    assert re.search(r"burst=\d+ nodelay", limit_req("per_address_rate"))
    web = start_web(*TRUST_NGINX)
    nginx = start_nginx(web)
    before = web.requests("/api/round")
    paths = ["/api/round" if i % 50 == 49 else "/nothing-here" for i in range(1000)]

    async def flood() -> list[tuple[str, Response]]:
        batches = await asyncio.gather(
            *(pipelined("127.0.0.4", nginx.port, paths) for _ in range(8))
        )
        return [(path, r) for batch in batches for path, r in zip(paths, batch, strict=True)]

    answers: list[tuple[str, Response]] = []
    for _ in range(6):
        answers += asyncio.run(flood())
        if any(path == "/api/round" and r.status == 503 for path, r in answers):
            break
    refused = [(path, r) for path, r in answers if r.status == 503]
    assert refused, f"nothing was refused in {len(answers)} requests"
    for _, r in refused:
        assert r.headers["retry-after"] == "1" and r.headers["content-type"] == "application/json"
        assert json.loads(r.body) == {
            "error": "overloaded",
            "detail": "too many requests from this address or player; retry after Retry-After",
        }, "nginx's refusal, not the app's door"
    rounds = [r.status for path, r in answers if path == "/api/round"]
    assert set(rounds) == {200, 503}, set(rounds)
    assert web.requests("/api/round") - before == rounds.count(200)
    with client("127.0.0.5") as other:
        assert other.get(f"{nginx.base}/api/round").status_code == 200


def test_a_players_guesses_are_paced_per_token_and_nothing_else_is() -> None:
    """The per-player pace is keyed on the bearer token of ``POST /api/guesses`` alone (an
    empty key is not counted): two at once, like the door's honest pace, then delayed, not
    refused, up to the game's own guess burst, at no more than the game's own rate."""
    mapped = re.search(
        r'map\s+"\$request_method \$uri"\s+\$guess_sender\s*\{([^}]*)\}', shipped_text()
    )
    assert mapped is not None, "the guess sender's map"
    pairs = re.findall(r'^\s*("[^"]*"|\S+)\s+([^;]+);', mapped[1], re.MULTILINE)
    entries = {k.strip('"'): v for k, v in pairs}
    assert entries == {"POST /api/guesses": "$http_authorization", "default": '""'}, entries
    (zone,) = [z for z in directives("limit_req_zone") if "zone=per_player_guesses:" in z]
    assert zone.startswith("$guess_sender ")
    rate = float(re.search(r"rate=(\d+)r/s", zone)[1])  # type: ignore[index]
    paced = limit_req("per_player_guesses")
    burst = int(re.search(r"burst=(\d+)", paced)[1])  # type: ignore[index]
    delay = int(re.search(r" delay=(\d+)", paced)[1])  # type: ignore[index]
    game = Config()
    assert 0 < rate <= game.guess_rate
    assert burst == game.guess_burst
    assert delay + 1 == PLAYER_IN_FLIGHT
    assert "nodelay" not in paced


def test_a_players_guesses_past_two_at_once_wait_at_nginx_and_past_its_burst_are_refused(
    start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    """Player A sends 32 guesses at once, on 32 connections: nginx passes two, holds the next
    (up to its burst of 20 waiting) and sends them on paced, and refuses the rest itself, in
    the contract's JSON (unless the 32 reached it spread over more than 1.6 s); every guess
    that reached the app was accepted (202) and the app saw no other. Player B, on the same
    address, sends one guess after A's and is answered before A's last: the pace is A's, not
    its address's. A's 25 reads (GET /api/round) at once before that are not counted: had
    they been, the last of them would have been refused (25 against a burst of 20)."""
    web = start_web(*TRUST_NGINX)
    nginx = start_nginx(web)
    source = "127.0.0.7"
    with client(source) as http:
        tokens = []
        for name in ("A", "B"):
            made = http.post(f"{nginx.base}/api/players", json={"name": name})
            assert made.status_code == 201, made.text
            tokens.append(made.json()["token"])
        rnd = http.get(f"{nginx.base}/api/round").json()
    alice, bob = ({"Authorization": f"Bearer {t}"} for t in tokens)
    body = {"round_id": rnd["round_id"], "guess": [rnd["palette"][0]] * rnd["length"]}
    before = web.requests("/api/guesses")

    async def run() -> tuple[list[tuple[float, httpx.Response]], float, list[int]]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
        transport = httpx.AsyncHTTPTransport(local_address=source, limits=limits)
        async with httpx.AsyncClient(
            base_url=nginx.base, transport=transport, trust_env=False, timeout=30
        ) as h:
            reads = await asyncio.gather(*(h.get("/api/round", headers=alice) for _ in range(25)))

            async def timed(headers: dict[str, str]) -> tuple[float, httpx.Response]:
                r = await h.post("/api/guesses", json=body, headers=headers)
                return time.monotonic(), r

            a = [asyncio.create_task(timed(alice)) for _ in range(32)]
            await asyncio.sleep(0.05)
            b_at, b = await timed(bob)
            assert b.status_code == 202, b.text
            return list(await asyncio.gather(*a)), b_at, [r.status_code for r in reads]

    answers, b_at, reads = asyncio.run(run())
    assert reads == [200] * 25
    statuses = [r.status_code for _, r in answers]
    refused = [r for _, r in answers if r.status_code == 503]
    assert set(statuses) <= {202, 503} and refused, statuses
    assert statuses.count(202) >= 20, statuses  # two at once and a burst of 20 waiting
    for r in refused:
        assert r.json()["detail"].endswith("from this address or player; retry after Retry-After")
    assert b_at < max(at for at, r in answers if r.status_code == 202), "B waited for A's pace"
    assert web.requests("/api/guesses") - before == statuses.count(202) + 1


def test_slow_heads_and_bodies_are_cut_by_nginx_before_the_app(
    start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    header_s, body_s = (
        seconds(directive("client_header_timeout")),
        seconds(directive("client_body_timeout")),
    )
    # nginx cuts a head no later than the app would (and bodies within the same bound, so
    # this test stays short).
    assert header_s <= HEAD_TIMEOUT_S and body_s <= HEAD_TIMEOUT_S
    web = start_web(*TRUST_NGINX)
    nginx = start_nginx(web)

    async def stalled(request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", nginx.port, local_addr=("127.0.0.6", 0)
        )
        writer.write(request)
        await writer.drain()
        try:
            return await asyncio.wait_for(reader.read(-1), max(header_s, body_s) + 4)
        finally:
            writer.close()

    async def both() -> list[bytes]:
        head = b"POST /api/players HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        body = head + b"Content-Length: 100\r\n\r\n" + b'{"name": "'
        return list(await asyncio.gather(stalled(head), stalled(body)))

    # Each connection is closed (nginx sends nothing after a 408 timeout) in time.
    assert asyncio.run(both()) == [b"", b""]
    assert web.requests("/api/players") == 0, "a stalled request reached the app"


def test_nginx_answers_in_the_contracts_json_when_no_replica_does_or_a_body_is_too_large(
    start_nginx: Callable[..., Nginx],
) -> None:
    require_nginx()
    nginx = start_nginx(free_port())  # nothing listens there
    with client("127.0.0.7") as http:
        down = http.get(f"{nginx.base}/api/round")
        big = http.post(f"{nginx.base}/api/players", content=b"x" * 100_000)
    assert down.status_code == 503 and down.json()["error"] == "unavailable"
    assert down.headers["retry-after"] == "1"
    assert big.status_code == 413 and big.json()["error"] == "body_too_large"


# -- a replica's refusal -------------------------------------------------------------------------


def test_a_replicas_shed_503_is_passed_on_and_not_retried_on_the_other(
    tmp_path: Path, start_web: Callable[..., Web], start_nginx: Callable[..., Nginx]
) -> None:
    """Replica A's door works on one request at a time (light senders: two) and sheds at
    once (no wait); two slow requests held on A directly (its own SQLite file, write-locked)
    fill it. Of GETs round-robined over A and B, A's answers are its own 503 overloaded,
    never B's retry of them."""
    from codemojex.store import migrate

    own = tmp_path / "shedding.db"
    migrate(f"sqlite:///{own}")
    shedding = start_web(
        *TRUST_NGINX,
        *("--database-url", f"sqlite:///{own}"),
        env={"CODEMOJEX_DOOR_IN_FLIGHT": "1", "CODEMOJEX_DOOR_WAIT_MS": "0"},
    )
    other = start_web(*TRUST_NGINX)
    nginx = start_nginx(shedding, other)

    async def run() -> list[httpx.Response]:
        with sql_write_locked(own):
            held = [await slow_request(shedding.port) for _ in range(2)]
            try:
                await asyncio.to_thread(
                    wait_until, lambda: shedding.door_working() >= 2, 10, "A's door to fill"
                )
                async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
                    url = f"{nginx.base}/api/round"
                    return list(await asyncio.gather(*(http.get(url) for _ in range(6))))
            finally:
                for _, writer in held:
                    writer.close()

    before = other.requests("/api/round")
    answers = asyncio.run(run())
    shed = [r for r in answers if r.status_code == 503]
    served = [r for r in answers if r.status_code == 200]
    assert len(shed) + len(served) == len(answers), [r.status_code for r in answers]
    assert shed, "every request was served: a shed one was retried on the other replica"
    for r in shed:
        assert r.json()["error"] == "overloaded" and "retry-after" in r.headers
        assert "from this address" not in r.json()["detail"], "nginx's refusal, not A's"
    assert other.requests("/api/round") - before == len(served)
