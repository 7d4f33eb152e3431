"""``codemojex up --web-processes 2``: two web servers on one port (SO_REUSEPORT).

The kernel spreads connections over both; each process has its own hub, which reads every
event, so every socket gets its player's scores once whichever process holds it; and when
one web process dies the other keeps answering while the supervisor starts a new one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest
import websockets

from harness.running import Up, wait_until

pytestmark = pytest.mark.slow


def _sockets(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return n


def _listening(pid: int, port: int) -> bool:
    """Whether ``pid`` holds a socket listening on ``port`` (its own SO_REUSEPORT one)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            pass
    return False


def test_two_web_processes_share_the_port_and_cover_for_each_other(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "1", "--web-processes", "2")
    webs = up.web_pids()
    assert len(webs) == 2, webs
    # Both must listen before the kernel can spread connections over them (the second
    # may still be starting when the first answers).
    wait_until(lambda: all(_listening(pid, up.port) for pid in webs), 30, "both listening")
    http = httpx.Client(base_url=up.base, timeout=5, trust_env=False)
    players = []
    for i in range(24):
        r = http.post("/api/players", json={"name": f"w{i}"})
        assert r.status_code == 201, r.text
        players.append(r.json())
    round_ = http.get("/api/round").json()
    before = {pid: _sockets(pid) for pid in webs}

    async def play() -> tuple[dict[int, int], dict[str, list[str]]]:
        socks = [
            await websockets.connect(
                f"ws://127.0.0.1:{up.port}/ws?token={p['token']}", open_timeout=5
            )
            for p in players
        ]
        try:
            for ws in socks:
                await ws.recv()  # greeted: the connection is held by one of the two
            held = {pid: _sockets(pid) - before[pid] for pid in webs}
            jobs: dict[str, list[str]] = {}
            async with httpx.AsyncClient(base_url=up.base, timeout=5, trust_env=False) as h:
                for p in players:
                    r = await h.post(
                        "/api/guesses",
                        headers={"Authorization": f"Bearer {p['token']}"},
                        json={"round_id": round_["round_id"], "guess": round_["palette"][:4]},
                    )
                    assert r.status_code == 202, r.text
                    jobs[p["player_id"]] = [r.json()["job_id"]]
            got: dict[str, list[str]] = {p["player_id"]: [] for p in players}

            async def collect(ws: websockets.ClientConnection, pid: str) -> None:
                try:
                    async with asyncio.timeout(3):
                        while True:
                            m = orjson.loads(await ws.recv())
                            if m["type"] == "score":
                                got[pid].append(m["job_id"])
                except TimeoutError:
                    pass

            await asyncio.gather(
                *(collect(ws, p["player_id"]) for ws, p in zip(socks, players, strict=True))
            )
            assert got == jobs  # each player's score, once, on their own socket
            return held, got
        finally:
            for ws in socks:
                await ws.close()

    held, _ = asyncio.run(play())
    assert sum(held.values()) >= 24 and all(n > 0 for n in held.values()), held

    # One web process dies: connections it held are reset, but new ones all reach the
    # survivor, and a new process takes its place.
    http.close()
    os.kill(webs[0], signal.SIGKILL)
    wait_until(lambda: webs[0] not in up.web_pids(), 5, "the killed web process to go")
    for _ in range(20):
        fresh = httpx.get(
            f"{up.base}/healthz", timeout=5, trust_env=False, headers={"Connection": "close"}
        )
        assert fresh.status_code == 200
    wait_until(
        lambda: len(up.web_pids()) == 2 and webs[0] not in up.web_pids(),
        20,
        "the supervisor to start a second web process again",
        logs=up.logs,
    )
    assert up.stop() == 0, up.logs()
