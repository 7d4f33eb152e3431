"""The mashers: a loop per address that sends as fast as the door answers, and the masher
processes (``python -m bench.bench_door masher-child``) that run them off the client's loop."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from harness.mashers import MashTally, mash_loop


@dataclass
class MasherSpec:
    """One masher process's part of a row: its mashers, each from ``addresses[i]``."""

    port: int
    round_id: str
    palette: list[str]
    length: int
    addresses: list[str]
    in_flight: int
    duration: float
    seed: int
    name: str
    drain_s: float = 60.0


async def run_mashers(spec: MasherSpec) -> dict[str, Any]:
    """A masher process's work: sign its mashers up (each from its address), open a socket
    each (scores counted per job, to check every accepted guess is scored once), run their
    closed loops for ``duration``, wait for the accepted guesses' scores, and read every
    masher's guesses back (``GET /api/guesses``): what the verdict needs."""
    base = f"http://127.0.0.1:{spec.port}"
    clients = {
        a: httpx.AsyncClient(
            base_url=base,
            timeout=30,
            transport=httpx.AsyncHTTPTransport(local_address=a),
            trust_env=False,
        )
        for a in set(spec.addresses)
    }
    scores: dict[str, int] = {}
    sockets: list[ClientConnection] = []
    readers: list[asyncio.Task[None]] = []

    async def read(sock: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            async for raw in sock:
                data = raw if isinstance(raw, bytes) else raw.encode()
                if b'"type":"score"' in data:
                    job = str(orjson.loads(data).get("job_id"))
                    scores[job] = scores.get(job, 0) + 1

    async def patient(method: str, address: str, path: str, **kw: Any) -> httpx.Response:
        for _ in range(30):
            r = await clients[address].request(method, path, **kw)
            if r.status_code not in (429, 503):
                return r
            await asyncio.sleep(int(r.headers.get("retry-after", "1")))
        return r

    try:
        tokens = []
        for i, address in enumerate(spec.addresses):
            r = await patient("POST", address, "/api/players", json={"name": f"{spec.name}-{i}"})
            r.raise_for_status()
            tokens.append(str(r.json()["token"]))
        ws = f"ws://127.0.0.1:{spec.port}/ws?token="
        for token, address in zip(tokens, spec.addresses, strict=True):
            sock = await connect(
                ws + quote(token), compression=None, local_addr=(address, 0), open_timeout=30
            )
            sockets.append(sock)
            readers.append(asyncio.create_task(read(sock)))
        tally = MashTally()
        rng = random.Random(spec.seed)
        started, t0 = time.time(), time.monotonic()
        await asyncio.gather(
            *(
                mash_loop(
                    spec.port,
                    token,
                    spec.round_id,
                    spec.palette,
                    spec.length,
                    t0 + spec.duration,
                    tally,
                    source=address,
                    rng=random.Random(rng.random()),
                )
                for token, address in zip(tokens, spec.addresses, strict=True)
                for _ in range(spec.in_flight)
            )
        )
        load_s = time.monotonic() - t0
        accepted = set(tally.accepted)
        deadline = time.monotonic() + spec.drain_s
        while time.monotonic() < deadline and any(j not in scores for j in accepted):
            await asyncio.sleep(0.2)
        stored: dict[str, dict[str, Any]] = {}
        for token, address in zip(tokens, spec.addresses, strict=True):
            r = await patient(
                "GET",
                address,
                f"/api/guesses?round_id={spec.round_id}",
                headers={"Authorization": f"Bearer {token}"},
            )
            for g in r.json().get("guesses", []) if r.status_code == 200 else []:
                stored[str(g["job_id"])] = g
    finally:
        for sock in sockets:
            with contextlib.suppress(Exception):
                await sock.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for http in clients.values():
            await http.aclose()
    unscored = [j for j in accepted if not scores.get(j)]
    unstored = [
        j
        for j in accepted
        if stored.get(j, {}).get("state") != "completed" or stored.get(j, {}).get("score") is None
    ]
    return {
        "load_started_at": started,
        "load_s": load_s,
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "submitted": sum(tally.statuses.values()),
        "accepted": len(tally.accepted),
        "errors": dict(tally.errors),
        # lost: accepted and never scored on its socket, or not stored completed with a
        # score; doubled: scored twice on its socket, or one job answered 202 twice
        "lost": len(set(unscored) | set(unstored)),
        "doubled": sum(1 for j in accepted if scores.get(j, 0) > 1)
        + len(tally.accepted)
        - len(accepted),
        "scored": sum(1 for j in accepted if scores.get(j)),
    }


def masher_child(spec_path: Path, out_path: Path) -> int:
    """``python -m bench.bench_door masher-child SPEC OUT``: a masher process."""
    spec = MasherSpec(**orjson.loads(spec_path.read_bytes()))
    out_path.write_bytes(orjson.dumps(asyncio.run(run_mashers(spec))))
    return 0
