"""A crowd of watchers for bench_game: N players whose websockets only read.

    python -m bench.watchers --host H --port P --count N [--offset 0] [--tag T]
        [--create-connections 8] [--connect-concurrency 64]

Run by :class:`Fleet` (bench_game ``--watchers N``), one or two of these processes, so the
crowd's CPU is its own and printed apart from the load client's. Each one creates its
players (``POST /api/players`` on a few keep-alive connections), opens one socket each
(``GET /ws?token=…``, no ``Origin``) at a bounded concurrency, and from then on only reads:
per socket it counts the bytes and the data frames received and, by a prefix check of the
payload's first bytes, the ``progress`` messages; only frame headers are parsed, payloads are
skipped unread. It sends nothing but a masked PONG for each of the server's PINGs (uvicorn
closes a socket that does not answer its keep-alive pings) and, at the end, the close
handshake. Raw asyncio protocols on uvloop (if installed): no task, future or message
object per frame.

Talks JSON lines on stdout (``progress`` while setting up, then ``ready``; ``report`` and
``closed`` on request) and takes commands on stdin, one a line: ``mark`` records the
counters, the time and this process's CPU; ``report`` prints the marks since the last one;
``close`` closes every socket (code 1000), prints ``closed`` and exits. EOF on stdin is a
``close``: a dead parent leaves no crowd behind.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson

from bench.watchers.watcher import (
    CLOSE_TIMEOUT_S,
    DONE,
    GREET_TIMEOUT_S,
    OPEN,
    Watcher,
    now,
    raise_nofile,
)

try:
    import uvloop
except ImportError:  # pragma: no cover - a dependency on Linux
    uvloop = None  # type: ignore[assignment]


class Crowd:
    def __init__(self, host: str, port: int, count: int, offset: int, tag: str) -> None:
        self.host, self.port, self.count, self.offset, self.tag = host, port, count, offset, tag
        self.tokens: list[str] = []
        self.watchers: list[Watcher] = []
        self.created = 0
        self.connected = 0  # 101 and the first frame
        self.failed: Counter[str] = Counter()  # setup failures, by reason
        self.marks: list[dict[str, Any]] = []

    def emit(self, event: str, **fields: Any) -> None:
        sys.stdout.buffer.write(orjson.dumps({"event": event, **fields}) + b"\n")
        sys.stdout.buffer.flush()

    async def progress(self) -> None:
        while True:
            self.emit(
                "progress",
                created=self.created,
                connected=self.connected,
                failed=sum(self.failed.values()),
            )
            await asyncio.sleep(0.25)

    # -- players ----------------------------------------------------------------------------

    async def create_players(self, connections: int) -> None:
        todo = iter(range(self.offset, self.offset + self.count))
        got: dict[int, str] = {}

        async def one_connection() -> None:
            reader = writer = None
            try:
                for i in todo:
                    body = orjson.dumps({"name": f"{self.tag}-w{i}"[:32]})
                    req = (
                        f"POST /api/players HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                        "Content-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n"
                    ).encode() + body
                    for attempt in range(20):
                        if writer is None:
                            reader, writer = await asyncio.open_connection(self.host, self.port)
                        assert reader is not None
                        try:
                            writer.write(req)
                            status, raw, close = await asyncio.wait_for(_response(reader), 15)
                        except (OSError, asyncio.IncompleteReadError, TimeoutError):
                            status, raw, close = 0, b"", True
                        if close:
                            writer.close()
                            reader = writer = None
                        if status == 201:
                            got[i] = orjson.loads(raw)["token"]
                            self.created += 1
                            break
                        if status in (0, 429, 503) and attempt < 19:
                            await asyncio.sleep(0.5)
                            continue
                        self.failed[f"create {status}"] += 1
                        break
            finally:
                if writer is not None:
                    writer.close()

        await asyncio.gather(*(one_connection() for _ in range(max(1, connections))))
        self.tokens = [got[i] for i in sorted(got)]

    # -- sockets ----------------------------------------------------------------------------

    async def open_sockets(self, concurrency: int) -> None:
        loop = asyncio.get_running_loop()
        sem = asyncio.Semaphore(max(1, concurrency))
        host = f"{self.host}:{self.port}"

        async def one(token: str) -> None:
            key = base64.b64encode(os.urandom(16)).decode()
            request = (
                f"GET /ws?token={quote(token, safe='')} HTTP/1.1\r\nHost: {host}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
            async with sem:
                try:
                    _, w = await asyncio.wait_for(
                        loop.create_connection(lambda: Watcher(request), self.host, self.port),
                        GREET_TIMEOUT_S,
                    )
                except (OSError, TimeoutError) as e:
                    self.failed[f"connect {type(e).__name__}"] += 1
                    return
                try:
                    await asyncio.wait_for(asyncio.shield(w.greeted), GREET_TIMEOUT_S)
                except TimeoutError:
                    w._end("greeting timeout")
                if w.state == DONE:
                    self.failed[str(w.code)] += 1
                else:  # only these are counted from here on
                    self.watchers.append(w)
                    self.connected += 1

        await asyncio.gather(*(one(t) for t in self.tokens))

    # -- commands ---------------------------------------------------------------------------

    def mark(self) -> None:
        ws = self.watchers
        t, cpu = now(), time.process_time()
        self.marks.append(
            {
                "t": t,
                "cpu_s": cpu,
                "bytes": [w.bytes for w in ws],
                "frames": [w.frames for w in ws],
                "progress": [w.progress for w in ws],
                "open": sum(1 for w in ws if w.state == OPEN),
                # ended by the server or the network, not by our close: by code
                "closed": dict(Counter(w.code for w in ws if w.code and not w.we_closed)),
                "pings": sum(w.pings for w in ws),
            }
        )

    async def close(self) -> dict[str, Any]:
        ws = [w for w in self.watchers if w.state != DONE]
        started = now()
        for w in ws:
            w.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(asyncio.shield(w.done) for w in ws)), CLOSE_TIMEOUT_S
            )
        clean = sum(1 for w in ws if w.we_closed and w.code == "1000" and w.state == DONE)
        aborted = 0
        for w in ws:
            if w.state != DONE:
                aborted += 1
                w.abort()
        return {
            "closing": len(ws),
            "clean": clean,
            "aborted": aborted,
            "close_s": round(now() - started, 3),
        }


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = (await reader.readuntil(b"\r\n\r\n")).lower()
    i = head.find(b"\r\ncontent-length:")
    n = 0 if i < 0 else int(head[i + 17 : head.index(b"\r\n", i + 17)])
    body = await reader.readexactly(n) if n else b""
    return int(head[9:12]), body, b"\r\nconnection: close" in head


async def serve(a: argparse.Namespace) -> int:
    nofile = raise_nofile()
    crowd = Crowd(a.host, a.port, a.count, a.offset, a.tag)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    ticker = asyncio.create_task(crowd.progress())
    began = now()
    try:
        await crowd.create_players(a.create_connections)
        created = now()
        await crowd.open_sockets(a.connect_concurrency)
    finally:
        ticker.cancel()
    crowd.emit(
        "ready",
        pid=os.getpid(),
        count=a.count,
        created=crowd.created,
        connected=crowd.connected,
        failed=dict(crowd.failed),
        create_s=round(created - began, 3),
        connect_s=round(now() - created, 3),
        nofile=nofile,
        loop="uvloop" if uvloop else "asyncio",
    )
    while True:
        line = (await stdin.readline()).strip()
        if line == b"mark":
            crowd.mark()
        elif line == b"report":
            marks, crowd.marks = crowd.marks, []
            crowd.emit("report", marks=marks)
        elif line in (b"close", b""):  # EOF: the parent is gone
            summary = await crowd.close()
            crowd.emit("closed", cpu_s=time.process_time(), **summary)
            return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.watchers", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--offset", type=int, default=0, help="the first watcher's number")
    p.add_argument("--tag", default="watch", help="player names: TAG-wN")
    p.add_argument("--create-connections", type=int, default=8)
    p.add_argument("--connect-concurrency", type=int, default=64)
    a = p.parse_args(argv)
    runner: Callable[[Any], int] = uvloop.run if uvloop else asyncio.run
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        return runner(serve(a))
    return 1
