"""The honest players: a guess at an honest pace each, their answers and scores timed, and
their figures over a row's window."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from bench.door.options import ONSET_S, SLOW_S, masher_address
from codemojex.mash.ledger import percentile as pct

# -- honest players ---------------------------------------------------------------------------


@dataclass
class Sent:
    player: int
    sent: float
    answered: float | None = None
    status: int | None = None
    code: str = ""
    job_id: str | None = None


class Honest:
    """The honest players: one socket each (scores timestamped on arrival) and a light HTTP
    client; one guess in flight per player at most, one attempt per guess."""

    def __init__(self, base: str, players: int, rng: random.Random) -> None:
        self.base = base
        self.n = players
        self.rng = rng
        self.http = httpx.AsyncClient(
            base_url=base,
            timeout=httpx.Timeout(30, connect=5),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            trust_env=False,
        )
        self.tokens: list[str] = []
        self.sockets: list[ClientConnection] = []
        self.readers: list[asyncio.Task[None]] = []
        self.busy: set[int] = set()
        self.sent: list[Sent] = []
        self.scores: dict[str, list[float]] = {}  # job id -> arrival times on its socket
        self.wrong_socket = 0
        self.round_id = ""
        self.palette: list[str] = []
        self.length = 4
        self.tasks: set[asyncio.Task[None]] = set()
        # > 0: each player's guesses come from masher_address(player, spread), not its own
        self.spread = 0
        self.others: dict[str, httpx.AsyncClient] = {}

    def client(self, player: int) -> httpx.AsyncClient:
        """The player's HTTP client: its own address's, or the one it is spread to."""
        if not self.spread:
            return self.http
        address = masher_address(player, self.spread)
        http = self.others.get(address)
        if http is None:
            http = self.others[address] = httpx.AsyncClient(
                base_url=self.base,
                timeout=httpx.Timeout(30, connect=5),
                limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
                transport=httpx.AsyncHTTPTransport(local_address=address),
                trust_env=False,
            )
        return http

    async def setup(self) -> None:
        rnd = (await self.http.get("/api/round")).json()
        self.round_id, self.palette, self.length = rnd["round_id"], rnd["palette"], rnd["length"]
        for i in range(self.n):
            r = await self.http.post("/api/players", json={"name": f"honest-{i}"})
            r.raise_for_status()
            self.tokens.append(r.json()["token"])
        ws = "ws" + self.base.removeprefix("http")
        for i, token in enumerate(self.tokens):
            sock = await connect(
                f"{ws}/ws?token={quote(token)}", compression=None, max_size=1 << 24
            )
            self.sockets.append(sock)
            self.readers.append(asyncio.create_task(self._read(i, sock)))

    async def _read(self, player: int, sock: ClientConnection) -> None:
        with contextlib.suppress(Exception):
            async for raw in sock:
                data = raw if isinstance(raw, bytes) else raw.encode()
                if b'"type":"score"' not in data:
                    continue  # progress, leaderboard: not parsed
                at = time.monotonic()
                msg = orjson.loads(data)
                self.scores.setdefault(str(msg.get("job_id")), []).append(at)

    def start_one(self) -> bool:
        idle = [i for i in range(self.n) if i not in self.busy]
        if not idle:
            return False
        player = self.rng.choice(idle)
        self.busy.add(player)
        task = asyncio.create_task(self._guess(player))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return True

    async def _guess(self, player: int) -> None:
        s = Sent(player, time.monotonic())
        self.sent.append(s)
        guess = [self.rng.choice(self.palette) for _ in range(self.length)]
        try:
            r = await self.client(player).post(
                "/api/guesses",
                json={"round_id": self.round_id, "guess": guess},
                headers={
                    "Authorization": f"Bearer {self.tokens[player]}",
                    "Idempotency-Key": uuid.uuid4().hex,
                },
            )
            s.answered, s.status = time.monotonic(), r.status_code
            if r.status_code == 202:
                s.job_id = r.json()["job_id"]
            else:
                with contextlib.suppress(ValueError):
                    body = r.json()
                    s.code = str(body.get("error", ""))
                    if s.code == "overloaded":  # the door's two reasons
                        s.code += " (address)" if "address" in body.get("detail", "") else ""
        except httpx.HTTPError as exc:
            s.code = type(exc).__name__
        finally:
            self.busy.discard(player)

    async def run_until(self, rate: float, done: asyncio.Future[Any] | float) -> None:
        """Offer ``rate`` guesses a second until ``done`` (a future, or a monotonic time)."""
        due = time.monotonic()
        while True:
            if isinstance(done, float):
                if time.monotonic() >= done:
                    break
            elif done.done():
                break
            due += self.rng.expovariate(rate)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.start_one()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=30)

    async def close(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(Exception):
                await sock.close()
        for task in self.readers:
            task.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        await self.http.aclose()
        for http in self.others.values():
            await http.aclose()


def honest_figures(h: Honest, t0: float, t1: float) -> dict[str, Any]:
    """The honest guesses sent in [t0, t1) (monotonic)."""
    window = [s for s in h.sent if t0 <= s.sent < t1]
    accepted = [s for s in window if s.status == 202]
    answer = [(s.answered or 0) - s.sent for s in accepted]
    to_score: list[float] = []
    steady: list[float] = []
    unscored = doubled = 0
    for s in accepted:
        arrivals = h.scores.get(str(s.job_id), [])
        if not arrivals:
            unscored += 1
            continue
        doubled += len(arrivals) > 1
        to_score.append(max(arrivals[0], s.answered or 0) - s.sent)
        if s.sent >= t0 + ONSET_S:
            steady.append(to_score[-1])
    others = Counter(f"{s.status or '-'} {s.code}".strip() for s in window if s.status != 202)
    refused_at = [round(s.sent - t0, 2) for s in window if s.status != 202][:20]
    slow_at = [
        (round(s.sent - t0, 2), round(((s.answered or 0) - s.sent) * 1000))
        for s in accepted
        if (s.answered or 0) - s.sent > SLOW_S
    ][:20]
    return {
        "sent": len(window),
        "accepted": len(accepted),
        "accepted_share": len(accepted) / len(window) if window else None,
        "not_accepted": dict(others),
        "not_accepted_at_s": refused_at,  # into the window (the first 20)
        "slow_202_at_s_ms": slow_at,  # (into the window, send->202 ms) past SLOW_S
        "unscored": unscored,
        "doubled": doubled,
        "send_to_202_ms": {"p50": _ms(pct(answer, 50)), "p99": _ms(pct(answer, 99))},
        "send_to_score_ms": {"p50": _ms(pct(to_score, 50)), "p99": _ms(pct(to_score, 99))},
        # the same, leaving out the window's first ONSET_S: the mashers' connections and
        # first requests all arrive then (1,600 of them for 200 mashers), a transient
        "steady_send_to_score_p99_ms": _ms(pct(steady, 99)),
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)
