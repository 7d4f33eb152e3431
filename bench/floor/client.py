"""The floor's load client: bench_game's open loop and raw-HTTP pool, one socket per player
for the scores."""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import orjson
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from bench.floor.parts import DRAIN_S, EMOJIS, now, token_of
from bench.game.http import Guess, Pool, Window, encode_request
from bench.game.player_socket import send_offsets


class ScoreSocket(asyncio.Protocol):
    """One player's websocket, parsed in ``data_received`` as bench_game's are."""

    def __init__(self, client: Client, uri: str) -> None:
        self.client = client
        self.proto = ClientProtocol(parse_uri(uri), max_size=1 << 24)
        self.transport: asyncio.Transport | None = None
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.proto.send_request(self.proto.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        t = now()
        self.proto.receive_data(data)
        for event in self.proto.events_received():
            if not isinstance(event, Frame):  # the handshake's response
                if not self.open.done():
                    self.open.set_result(None)
            elif event.opcode is Opcode.TEXT:
                self.client.scored(bytes(event.data), t)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.open.done():
            self.open.set_exception(ConnectionError("socket closed before its handshake"))

    def _flush(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        for data in self.proto.data_to_send():
            if data:
                self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


@dataclass
class Client:
    host: str
    port: int
    players: int
    window: Window | None = None
    jobs: dict[str, Guess] = field(default_factory=dict)
    early: dict[str, float] = field(default_factory=dict)  # scores that beat their 202
    sockets: list[ScoreSocket] = field(default_factory=list)

    async def connect(self, sockets: int) -> None:
        loop = asyncio.get_running_loop()
        for i in range(sockets):
            uri = f"ws://{self.host}:{self.port}/ws?token={token_of(i)}"
            _, sock = await loop.create_connection(
                functools.partial(ScoreSocket, self, uri), self.host, self.port
            )
            self.sockets.append(sock)
        await asyncio.wait_for(asyncio.gather(*(s.open for s in self.sockets)), 30)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()

    def answered(self, guess: Guess, status: int, body: bytes, t: float) -> None:
        guess.answered, guess.status = t, status
        w = guess.window
        w.answered += 1
        if status != 202:
            guess.error = body.decode(errors="replace")
            return
        w.accepted += 1
        job_id = orjson.loads(body)["job_id"]
        guess.job_id = job_id
        if job_id in self.early:
            self._score(guess, self.early.pop(job_id))
            w.score_before_202 += 1
        else:
            self.jobs[job_id] = guess

    def scored(self, text: bytes, t: float) -> None:
        job_id = orjson.loads(text)["job_id"]
        guess = self.jobs.pop(job_id, None)
        if guess is None:
            self.early[job_id] = t
        else:
            self._score(guess, t)

    def _score(self, guess: Guess, t: float) -> None:
        guess.scored = t
        guess.scores += 1
        guess.window.scored += 1

    async def offer(
        self,
        rate: float,
        duration: float,
        schedule: str,
        probe: Callable[[str], None],
        connections: int = 64,
    ) -> Window:
        """bench_game's open loop: sends at the schedule's times, never waiting for answers;
        then waits for the scores of every accepted guess."""
        rng = random.Random(f"floor:{rate}")
        offsets = send_offsets(rate, duration, schedule, rng)
        w = self.window = Window(rate, duration, len(offsets))
        requests = [self._request(i) for i in range(self.players)]
        conns = min(connections, max(8, math.ceil(rate / 8)))  # bench_game's pool size
        pool = await Pool(self.host, self.port, self.answered).open(conns)
        gc.collect()
        gc.disable()  # no collector pause mid-window; the records are acyclic
        try:
            probe("start")
            w.t0 = t0 = now() + 0.05
            i, n = 0, len(offsets)
            while i < n:
                t = now()
                if t0 + offsets[i] > t:
                    await asyncio.sleep(t0 + offsets[i] - t)
                    continue
                while i < n and t0 + offsets[i] <= t:
                    g = Guess(w, i % self.players, t0 + offsets[i])
                    w.guesses.append(g)
                    g.sent = now()
                    pool.send(requests[g.player][i & 7], g)
                    i += 1
            w.load_end = now()
            probe("loaded")
            deadline = now() + DRAIN_S
            while now() < deadline and not (
                w.answered == len(w.guesses) and w.scored >= w.accepted
            ):
                await asyncio.sleep(0.01)
            w.drained = w.answered == len(w.guesses) and w.scored >= w.accepted
            w.drain_end = now()
            probe("end")
        finally:
            gc.enable()
            await pool.close()
        return w

    def _request(self, player: int) -> list[bytes]:
        """Eight pre-encoded guesses per player, so sending costs the client a write."""
        rng = random.Random(player)
        host = f"{self.host}:{self.port}"
        out = []
        for _ in range(8):
            body = orjson.dumps({"guess": [rng.choice(EMOJIS) for _ in range(4)]})
            out.append(encode_request("POST", "/api/guesses", host, body, token_of(player)))
        return out
