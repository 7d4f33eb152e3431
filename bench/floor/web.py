"""The web floor: a bare ASGI callable under the game's uvicorn settings that checks a token
and enqueues a guess in one script."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import orjson
import redis.asyncio as aioredis

from bench.floor.parts import ENQUEUE, JOBS, QUEUE, SCORES, token_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class FloorApp:
    def __init__(self, redis_url: str, players: int) -> None:
        self.redis_url = redis_url
        self.tokens = {token_of(i).encode(): f"p{i}" for i in range(players)}
        self.sockets: dict[str, Send] = {}
        self.ids = itertools.count()
        self.prefix = f"{os.getpid()}-"
        self.sha = ""
        self.conn: aioredis.Redis | None = None
        self.reader: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http(scope, receive, send)
        elif kind == "websocket":
            await self.websocket(scope, receive, send)
        elif kind == "lifespan":
            await self.lifespan(receive, send)

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.conn = aioredis.from_url(self.redis_url)
                self.sha = await self.conn.script_load(ENQUEUE)
                self.reader = asyncio.create_task(self.read_scores())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.reader is not None:
                    self.reader.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/api/guesses" or scope["method"] != "POST":
            await answer(send, 404, b'{"error":"not_found"}')
            return
        body = b""
        while True:  # the body may come in several messages
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        player = None
        for name, value in scope["headers"]:
            if name == b"authorization" and value.startswith(b"Bearer "):
                player = self.tokens.get(value[7:])
        if player is None:
            await answer(send, 401, b'{"error":"unauthorized"}')
            return
        guess = orjson.loads(body)["guess"]
        job_id = self.prefix + str(next(self.ids))
        job = orjson.dumps([job_id, player, guess])
        assert self.conn is not None
        await self.conn.evalsha(self.sha, 2, JOBS, QUEUE, job_id, job)
        await answer(send, 202, orjson.dumps({"job_id": job_id}))

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        query = parse_qs(scope["query_string"].decode())
        player = self.tokens.get(query.get("token", [""])[0].encode())
        if player is None:
            await send({"type": "websocket.close", "code": 4401})
            return
        await send({"type": "websocket.accept"})
        self.sockets[player] = send
        try:
            while (await receive())["type"] != "websocket.disconnect":
                pass  # the floor's clients send nothing but the protocol's own frames
        finally:
            if self.sockets.get(player) is send:
                del self.sockets[player]

    async def read_scores(self) -> None:
        """One PUBLISH per batch; one text frame per guess to its player's socket."""
        assert self.conn is not None
        pubsub = self.conn.pubsub()
        await pubsub.subscribe(SCORES)
        async for message in pubsub.listen():
            if message["type"] != "message":
                continue
            for player, job_id, exact, near in orjson.loads(message["data"]):
                send = self.sockets.get(player)
                if send is None:
                    continue
                text = orjson.dumps(
                    {"type": "score", "job_id": job_id, "exact": exact, "near": near}
                )
                with contextlib.suppress(Exception):  # a socket closing under us
                    await send({"type": "websocket.send", "text": text.decode()})


async def answer(send: Send, status: int, body: bytes) -> None:
    # Content-Length set here: without it uvicorn answers chunked.
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def serve_web(redis_url: str, port: int, players: int) -> None:
    import uvicorn

    from web.server import KEEP_ALIVE_S, WS_MAX_FRAME_BYTES, WS_PING_INTERVAL_S, WS_PING_TIMEOUT_S

    # web.server's values, with uvicorn's stock protocols: the game's connection guard and
    # frames extension are part of what the floor leaves out.
    config = uvicorn.Config(
        FloorApp(redis_url, players),
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        ws="websockets-sansio",
        ws_max_size=WS_MAX_FRAME_BYTES,
        ws_per_message_deflate=False,
        ws_ping_interval=WS_PING_INTERVAL_S,
        ws_ping_timeout=WS_PING_TIMEOUT_S,
        timeout_keep_alive=KEEP_ALIVE_S,
        proxy_headers=False,
        lifespan="on",
        log_config=None,
        access_log=False,
        log_level="warning",
    )
    uvicorn.Server(config).run()
