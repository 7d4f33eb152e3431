"""The web process as users run it (``codemojex up``), under the frames and logs an attacker
or a log reader would use: the limits are the production builder's (``web.server``), not a
test server's.

* no permessage-deflate: a client that offers it gets a socket without it, so a few bytes on
  the wire can never inflate into megabytes in the server;
* a frame over the contract's 16 KiB cap closes 1009, whether the protocol refuses it
  before buffering (a 15 MiB frame) or the app does (a 20 KiB one, under the protocol cap);
* twenty 15 MiB frames at once leave the web process's memory where it was;
* no player token reaches any log line of any process, accepted or refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from harness.running import Up, cmdline
from web.server import WS_MAX_FRAME_BYTES

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _web_pid(up: Up) -> int:
    pids = up.web_pids()
    assert len(pids) == 1, {p: cmdline(p) for p in up.track()}
    return pids[0]


def _player(up: Up, name: str) -> str:
    r = httpx.post(f"{up.base}/api/players", json={"name": name}, trust_env=False, timeout=5)
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


async def _close_code_after_sending(url: str, text: str) -> int | None:
    async with websockets.connect(
        url, max_size=None, compression=None, open_timeout=5, close_timeout=2
    ) as ws:
        try:
            await ws.send(text)
        except ConnectionClosed:
            pass  # the server may close while the frame is still going out
        try:
            async with asyncio.timeout(10):
                while True:
                    await ws.recv()
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


def test_frames_over_the_cap_close_1009_and_cost_the_server_no_memory(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "0")
    # One player per socket: a player may hold only a few sockets at once.
    urls = [f"ws://127.0.0.1:{up.port}/ws?token={_player(up, f'framer{i}')}" for i in range(21)]
    url = urls[20]
    web = _web_pid(up)

    async def attack() -> tuple[list[str], int | None, list[int | None], float]:
        # Offered compression is declined: the server's answer names no extension.
        async with websockets.connect(url, compression="deflate", open_timeout=5) as ws:
            extensions = [type(e).__name__ for e in ws.protocol.extensions]
        # Over the contract's cap, under the protocol's: the app's own check closes it.
        app_code = await _close_code_after_sending(url, "x" * (20 * 1024))
        assert 20 * 1024 < WS_MAX_FRAME_BYTES
        before = _rss_mb(web)
        codes = await asyncio.gather(
            *(_close_code_after_sending(u, "x" * (15 * MIB)) for u in urls[:20])
        )
        return extensions, app_code, list(codes), _rss_mb(web) - before

    extensions, app_code, codes, grown_mb = asyncio.run(attack())
    assert extensions == []
    assert app_code == 1009
    assert codes == [1009] * 20
    assert grown_mb < 50, f"the web process grew by {grown_mb:.0f} MB"
    # The server still serves after the storm.
    assert httpx.get(f"{up.base}/healthz", trust_env=False, timeout=5).status_code == 200


def test_no_token_in_any_log_line(start_up: Callable[..., Up]) -> None:
    up = start_up("--workers", "1", "--log-level", "debug")
    token = _player(up, "logged")

    async def sockets() -> None:
        async with websockets.connect(
            f"ws://127.0.0.1:{up.port}/ws?token={token}", open_timeout=5
        ) as ws:
            await ws.recv()  # the round: accepted and greeted
        with pytest.raises(websockets.InvalidStatus):  # refused before the upgrade: 403
            async with websockets.connect(
                f"ws://127.0.0.1:{up.port}/ws?token={token}x&after=0-0", open_timeout=5
            ):
                pass

    asyncio.run(sockets())
    r = httpx.get(f"{up.base}/api/round", trust_env=False, timeout=5)
    httpx.post(
        f"{up.base}/api/guesses",
        headers={"Authorization": f"Bearer {token}"},
        json={"round_id": r.json()["round_id"], "guess": ["x"]},
        trust_env=False,
    )
    assert up.stop() == 0, up.logs()
    logs = up.out_path.read_text(errors="replace") + up.err_path.read_text(errors="replace")
    assert "WebSocket /ws" in logs, "uvicorn's socket lines should be there, redacted"
    assert token not in logs
    assert token[:12] not in logs


def _raw_request(port: int, head: bytes, body_part: bytes, *, close_after: bool) -> bytes:
    """Send ``head`` and part of a body over a raw socket; then either hang up at once or
    wait for the server's answer (up to 15 s) and return it."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(head + body_part)
        if close_after:
            return b""
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_slow_bodies_get_408_and_abandoned_ones_a_single_quiet_line(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "0")
    token = _player(up, "slowpoke")
    head = (
        f"POST /api/guesses HTTP/1.1\r\nHost: 127.0.0.1:{up.port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 200\r\n\r\n"
    ).encode()
    # A body that stops arriving: the client's fault, answered 408 at the deadline.
    answer = _raw_request(up.port, head, b'{"round_id": "RND_', close_after=False)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b'"error":"request_timeout"' in rest
    # A client that leaves mid-body: nobody to answer, no traceback.
    for _ in range(3):
        _raw_request(up.port, head, b'{"round_id": ', close_after=True)
    # An event id bigger than Valkey's ids is no outage: the socket gets a gap, not 1013.

    async def resume_far_ahead() -> list[str]:
        url = f"ws://127.0.0.1:{up.port}/ws?token={token}&after=99999999999999999999-0"
        async with websockets.connect(url, open_timeout=5) as ws:
            return [str(await ws.recv()) for _ in range(3)]

    frames = asyncio.run(resume_far_ahead())
    assert '{"type":"gap"}' in frames
    assert httpx.get(f"{up.base}/healthz", trust_env=False, timeout=5).status_code == 200
    assert up.stop() == 0, up.logs()
    logs = up.err_path.read_text(errors="replace")
    assert "Traceback" not in logs and " E " not in logs, logs[-3000:]
    assert "valkey unavailable" not in logs.lower()
    assert sum("client left before its request was read" in line for line in logs.splitlines()) <= 3
