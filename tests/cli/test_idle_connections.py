"""Connections that never send a request, against the real ``codemojex web`` process.

* a connection that sends nothing, or half a request line, or half a second request after
  a keep-alive one, is closed once the head deadline passes (``web.connections``);
* one address past ``CODEMOJEX_CONNECTIONS_PER_ADDRESS`` has the surplus closed at accept,
  while another address is served; a trusted proxy is not capped as one address; a
  websocket gives its connection's place back when it closes;
* under ``prlimit --nofile=256`` (the process cannot raise its limit) the caps are cut to
  it, with a log line, and 250 idle connections from one address leave the process serving
  another.

Loopback has every 127/8 address, so a client bound to 127.0.0.2 is "another address".
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from harness.running import WebProcess, wait_until, web_processes
from web.connections import HEAD_TIMEOUT_S

pytestmark = pytest.mark.slow

OTHER_ADDRESS = "127.0.0.2"


class Web(WebProcess):
    """One ``codemojex web`` on a free port, and connections to it."""

    def connect(self, n: int, first_bytes: bytes = b"") -> list[socket.socket]:
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.settimeout(None)  # blocking: a MSG_DONTWAIT peek answers at once
            if first_bytes:
                s.sendall(first_bytes)
            socks.append(s)
        return socks

    def healthz_from(self, address: str, timeout: float = 3.0) -> int | str:
        """The status of ``GET /healthz`` over a new connection from ``address``."""
        transport = httpx.HTTPTransport(local_address=address)
        try:
            with httpx.Client(transport=transport, trust_env=False, timeout=timeout) as c:
                return c.get(f"{self.base}/healthz").status_code
        except httpx.HTTPError as e:
            return type(e).__name__


def read_response(s: socket.socket) -> bytes:
    """One whole response (head and its Content-Length body), however many segments it
    came in: a byte left unread would read as "not closed" below."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(4096)
    return head + b"\r\n\r\n" + body


def closed_by_server(s: socket.socket) -> bool:
    """The server has closed ``s`` (EOF or reset seen), without waiting."""
    try:
        return s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.fixture
def start_web(tmp_path: Path) -> Iterator[Callable[..., Web]]:
    """``start_web(env={...}, prefix=[...])`` -> a ready ``codemojex web``
    (:func:`harness.running.web_processes`)."""
    with web_processes(tmp_path, Web) as start:
        yield start


def test_connections_that_complete_no_request_head_are_closed(
    start_web: Callable[..., Web],
) -> None:
    web = start_web()
    idle = web.connect(30)
    half_line = web.connect(10, b"GET /healthz HTT")
    # A keep-alive connection served once, then half of a second request.
    second = web.connect(1, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0]
    assert b" 200 " in read_response(second)
    second.sendall(b"GET /healthz HTTP/1.1\r\nHo")
    socks = [*idle, *half_line, second]

    def still_open() -> str:
        groups = {"idle": idle, "half a line": half_line, "half a second request": [second]}
        counts = {name: sum(not closed_by_server(s) for s in g) for name, g in groups.items()}
        return f"still open: {counts}; web exit code {web.proc.poll()}"

    try:
        wait_until(
            lambda: all(closed_by_server(s) for s in socks),
            HEAD_TIMEOUT_S + 10,
            "the server to close every connection without a complete request head",
            lambda: f"{still_open()}\n{web.logs()}",
            interval=0.25,
        )
        assert web.healthz_from("127.0.0.1") == 200  # and it still serves
    finally:
        for s in socks:
            s.close()


def test_one_address_past_its_cap_is_closed_at_accept_while_another_is_served(
    start_web: Callable[..., Web],
) -> None:
    web = start_web(env={"CODEMOJEX_CONNECTIONS_PER_ADDRESS": "20"})
    socks = web.connect(40)
    try:
        # The surplus is closed at once, long before the head deadline could do it.
        wait_until(
            lambda: sum(closed_by_server(s) for s in socks) >= 20,
            HEAD_TIMEOUT_S / 2,
            "the connections past the cap to be closed at accept",
            web.logs,
        )
        assert sum(closed_by_server(s) for s in socks) == 20
        assert [web.healthz_from(OTHER_ADDRESS) for _ in range(5)] == [200] * 5
    finally:
        for s in socks:
            s.close()
    # Closed connections give their places back.
    wait_until(lambda: web.healthz_from("127.0.0.1") == 200, 10, "the address to be served")


def test_a_websocket_gives_its_place_back_when_it_closes(start_web: Callable[..., Web]) -> None:
    web = start_web(env={"CODEMOJEX_CONNECTIONS_PER_ADDRESS": "3"})
    r = httpx.post(f"{web.base}/api/players", json={"name": "ws"}, trust_env=False, timeout=5)
    assert r.status_code == 201, r.text
    url = f"ws://127.0.0.1:{web.port}/ws?token={r.json()['token']}"

    async def open_and_close(times: int) -> None:
        for _ in range(times):
            async with websockets.connect(url, open_timeout=5, close_timeout=2):
                pass

    asyncio.run(open_and_close(6))  # twice the cap, one after the other
    assert web.healthz_from("127.0.0.1") == 200


def test_a_trusted_proxy_is_not_capped_as_one_address(start_web: Callable[..., Web]) -> None:
    web = start_web(
        env={
            "CODEMOJEX_CONNECTIONS_PER_ADDRESS": "5",
            "CODEMOJEX_FORWARDED_ALLOW_IPS": "127.0.0.1",
        }
    )
    socks = web.connect(15)
    try:
        time.sleep(0.5)  # what a cap would have closed, it closes at once
        assert not any(closed_by_server(s) for s in socks)
        assert web.healthz_from("127.0.0.1") == 200
    finally:
        for s in socks:
            s.close()


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
def test_idle_connections_under_a_low_open_files_limit_do_not_starve_other_addresses(
    start_web: Callable[..., Web],
) -> None:
    web = start_web(prefix=["prlimit", "--nofile=256:256"])
    socks: list[socket.socket] = []
    try:
        for _ in range(250):
            with contextlib.suppress(OSError):
                socks.extend(web.connect(1))
        time.sleep(0.5)
        answers = [web.healthz_from(OTHER_ADDRESS) for _ in range(5)]
        assert answers == [200] * 5, f"{answers}\n{web.logs()}"
        assert "open-files limit 256" in web.logs()  # the caps were cut to it, said once
    finally:
        for s in socks:
            s.close()
