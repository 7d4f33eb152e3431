"""The load client: signs the players up, opens their sockets, offers each rate on an open-loop
schedule and matches every score to its guess."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import random
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import orjson

from bench.game.http import Guess, HttpError, Pool, Window, http_once
from bench.game.options import Options, now
from bench.game.player_socket import Player, Socket, send_offsets

_TYPE = re.compile(rb'"type":\s*"([a-z_]+)"')
# A socket's error frames carry the code of the HTTP answer they stand for, not its status.
_FRAME_STATUS = {"rate_limited": 429, "lane_full": 429, "overloaded": 503, "unavailable": 503}


class GameClient:
    """The players of one ``up``: their tokens, open sockets and the score ledger."""

    def __init__(self, base: str, players: int, seed: int, admin_token: str = "") -> None:
        url = urlsplit(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.ws_base = f"ws://{self.host}:{self.port}/ws?token="
        self.n_players = players
        self.admin_token = admin_token
        self.rng = random.Random(seed)
        self.players: list[Player] = []
        self.round: dict[str, Any] = {}
        self.bodies: list[bytes] = []  # "Content-Length: N\r\n\r\n{body}" for this round
        self.frames: list[bytes] = []  # the same guesses as socket frames (--via socket)
        self.rotations = 0
        self.jobs: dict[str, Guess] = {}
        self.early: dict[str, tuple[float, int]] = {}  # scores that beat their 202
        self.window: Window | None = None
        self.pool: Pool | None = None
        self.closing = False
        self._listeners: list[asyncio.Task[None]] = []
        self._refetch: asyncio.Task[None] | None = None

    # -- setup ----------------------------------------------------------------------------------

    async def start(self, name_prefix: str = "bench") -> GameClient:
        await self.fetch_round()
        sem = asyncio.Semaphore(16)
        tag = f"{name_prefix}{os.getpid() % 1000}-{int(time.time()) % 100000}"

        async def create(i: int) -> Player:
            async with sem:
                for attempt in range(20):
                    status, body = await http_once(
                        self.host, self.port, "POST", "/api/players", {"name": f"{tag}-{i}"[:32]}
                    )
                    if status == 201:
                        break
                    if status in (429, 503) and attempt < 19:
                        await asyncio.sleep(0.5)
                        continue
                    raise HttpError(f"POST /api/players: {status} {body}")
            prefix = (
                f"POST /api/guesses HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {body['token']}\r\n"
                "Content-Type: application/json\r\n"
            ).encode()
            return Player(i, body["player_id"], body["token"], prefix)

        self.players = list(await asyncio.gather(*(create(i) for i in range(self.n_players))))
        self._listeners = [asyncio.create_task(self._listen(p)) for p in self.players]
        await asyncio.wait_for(asyncio.gather(*(p.greeted.wait() for p in self.players)), 60)
        return self

    async def fetch_round(self) -> None:
        status, body = await http_once(self.host, self.port, "GET", "/api/round")
        if status != 200:
            raise HttpError(f"GET /api/round: {status} {body}")
        self._use_round(body)

    def _use_round(self, info: dict[str, Any]) -> None:
        if info.get("round_id") == self.round.get("round_id"):
            return
        if self.round:
            self.rotations += 1
        self.round = info
        palette, length = info["palette"], int(info["length"])
        bodies, frames = [], []
        for _ in range(512):
            guess = [self.rng.choice(palette) for _ in range(length)]
            body = orjson.dumps({"round_id": info["round_id"], "guess": guess})
            bodies.append(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            frames.append(
                orjson.dumps({"type": "guess", "round_id": info["round_id"], "guess": guess})
            )
        self.bodies, self.frames = bodies, frames

    def _refetch_round(self) -> None:
        if self._refetch is None or self._refetch.done():
            self._refetch = asyncio.create_task(self.fetch_round())

    async def _listen(self, p: Player) -> None:
        loop = asyncio.get_running_loop()
        while not self.closing:
            uri = self.ws_base + quote(p.token, safe="")
            if p.after:
                uri += "&after=" + quote(p.after, safe="")
            code = "refused"
            try:

                def socket(uri: str = uri) -> Socket:
                    return Socket(self, p, uri)

                _, sock = await asyncio.wait_for(
                    loop.create_connection(socket, self.host, self.port), 30
                )
                p.sock = sock
                code = await sock.closed
            except (OSError, TimeoutError):
                pass
            p.sock = None
            if self.closing:
                return
            if self.window is not None:
                self.window.ws_closes[code] += 1
            await asyncio.sleep(0.5)

    def message(self, p: Player, text: bytes, t: float) -> None:
        """One text frame from ``p``'s socket, read at ``t``: only a score or a round is
        decoded; progress and leaderboard messages are counted and dropped."""
        m = _TYPE.search(text)
        kind = m[1].decode() if m else "?"
        if self.window is not None:
            self.window.ws_messages[kind] += 1
            self.window.ws_bytes[kind] += len(text)
        if kind == "score":
            msg = orjson.loads(text)
            p.after = msg.get("event_id") or p.after
            guess = self.jobs.get(msg["job_id"])
            if guess is None:
                self.early[msg["job_id"]] = (t, p.index)
            else:
                self._scored(guess, t, p.index)
        elif kind == "round":
            msg = orjson.loads(text)
            if msg.get("state") == "open":
                self._use_round(msg)
            p.greeted.set()
        elif kind in ("leaderboard", "progress"):
            p.greeted.set()
        elif kind in ("accepted", "error") and p.sock is not None and p.sock.sent:
            # a socket answers its guess frames one at a time, in the order they came
            guess = p.sock.sent.popleft()
            if kind == "accepted":
                self.answer(guess, 202, text, t)
            else:
                code = orjson.loads(text).get("error")
                self.answer(guess, _FRAME_STATUS.get(code, 400), text, t)

    def _scored(self, guess: Guess, t: float, on: int) -> None:
        guess.scores += 1
        if guess.scored is None:
            guess.scored, guess.scored_on = t, on
            guess.window.scored += 1

    def answer(self, guess: Guess, status: int, body: bytes, t: float) -> None:
        guess.answered, guess.status = t, status
        w = guess.window
        w.answered += 1
        if status == 202:
            job_id = orjson.loads(body)["job_id"]
            guess.job_id = job_id
            w.accepted += 1
            self.jobs[job_id] = guess
            early = self.early.pop(job_id, None)
            if early is not None:
                w.score_before_202 += 1
                self._scored(guess, *early)
            return
        if status == 0:
            guess.error = body.decode()
            return
        try:
            guess.error = str(orjson.loads(body).get("error", f"http_{status}"))
        except (orjson.JSONDecodeError, AttributeError):
            guess.error = f"http_{status}"
        if guess.error == "round_closed":
            self._refetch_round()

    # -- the load -------------------------------------------------------------------------------

    async def offer(
        self,
        rate: float,
        duration: float,
        opts: Options,
        drain: float,
        on_tick: Callable[[Window, int], None] | None = None,
        probe: Callable[[], None] | None = None,
    ) -> Window:
        """Offer ``rate`` guesses/s for ``duration`` s, then wait up to ``drain`` s for every
        accepted guess's score. ``probe`` runs just before the first send, just after the last
        and when the drain ends (the CPU snapshots)."""
        rng = random.Random(f"{opts.seed}:{rate}")
        offsets = send_offsets(rate, duration, opts.schedule, rng)
        n_players = len(self.players)
        if opts.pick == "random":
            picks = [rng.randrange(n_players) for _ in offsets]
        else:
            first = rng.randrange(n_players)
            picks = [(first + i) % n_players for i in range(len(offsets))]
        w = Window(rate, duration, len(offsets))
        self.window = w
        conns = min(opts.connections, max(8, math.ceil(rate / 8)))
        self.pool = pool = await Pool(self.host, self.port, self.answer).open(conns)
        ticker = asyncio.create_task(self._tick(w, on_tick)) if on_tick else None
        # No collector pauses mid-window: the records are acyclic, and one window's garbage
        # is small; it is collected after the drain.
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            if probe:
                probe()
            w.t0 = t0 = now() + 0.05
            players, guesses, send = self.players, w.guesses, pool.send
            via_socket = opts.via == "socket"
            i, n = 0, len(offsets)
            while i < n:
                t = now()
                due = t0 + offsets[i]
                if due > t:
                    await asyncio.sleep(due - t)
                    continue
                while i < n and t0 + offsets[i] <= t:
                    p = players[picks[i]]
                    g = Guess(w, p.index, t0 + offsets[i])
                    guesses.append(g)
                    if via_socket:
                        sock = p.sock
                        g.sent = now()
                        if sock is None or not sock.send_guess(self.frames[i & 511], g):
                            self.answer(g, 0, b"socket closed", g.sent)
                    else:
                        data = p.prefix + self.bodies[i & 511]
                        g.sent = now()
                        send(data, g)
                    i += 1
            w.load_end = now()
            if probe:
                probe()
            w.backlog = await self._backlog()
            deadline = now() + drain
            while now() < deadline:
                if w.answered == len(guesses) and w.scored >= w.accepted:
                    w.drained = True
                    break
                await asyncio.sleep(0.01)
            w.drain_end = now()
            if probe:
                probe()
        finally:
            gc.enable()
            gc.unfreeze()
            if ticker:
                ticker.cancel()
            self.pool = None
            await pool.close()
        return w

    async def _tick(self, w: Window, on_tick: Callable[[Window, int], None]) -> None:
        while True:
            on_tick(w, len(w.guesses))
            await asyncio.sleep(0.5)

    async def _backlog(self) -> dict[str, int] | None:
        if not self.admin_token:
            return None
        with contextlib.suppress(OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            status, body = await http_once(
                self.host, self.port, "GET", "/api/admin/queue", token=self.admin_token
            )
            if status == 200:
                return {k: int(body[k]) for k in ("pending", "active", "scheduled")}
        return None

    async def close(self) -> None:
        self.closing = True
        sockets = [p.sock for p in self.players if p.sock is not None]
        for sock in sockets:
            sock.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(s.closed for s in sockets)), 3)
        for sock in sockets:
            sock.abort()
        for task in self._listeners:
            task.cancel()
        await asyncio.gather(*self._listeners, return_exceptions=True)
        if self._refetch:
            self._refetch.cancel()
