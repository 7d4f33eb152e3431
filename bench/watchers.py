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
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote

import orjson

try:
    import uvloop
except ImportError:  # pragma: no cover - a dependency on Linux
    uvloop = None  # type: ignore[assignment]

now = time.perf_counter  # CLOCK_MONOTONIC: one clock across processes
PROGRESS = b'{"type":"progress"'
_PLEN = len(PROGRESS)
GREET_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0
MASK = os.urandom(4)  # a client's frames are masked (RFC 6455 5.3); one key is enough here

CONNECTING, OPEN, CLOSING, DONE = range(4)


def raise_nofile() -> int:
    """The soft limit on open files raised to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def _masked(opcode: int, payload: bytes) -> bytes:
    """One client frame (FIN, ``opcode``) with a payload of at most 125 bytes."""
    body = bytes(b ^ MASK[i & 3] for i, b in enumerate(payload))
    return bytes((0x80 | opcode, 0x80 | len(payload))) + MASK + body


# ---------------------------------------------------------------------------------------------
# One watcher


class Watcher(asyncio.Protocol):
    """One read-only socket. ``data_received`` walks frame headers only: a data frame's
    payload is skipped (counted, never copied, unless it is split mid-header or within the
    progress prefix); control frames are read whole (at most 125 bytes)."""

    __slots__ = (
        "bytes",
        "code",
        "done",
        "frames",
        "greeted",
        "head",
        "pend",
        "pings",
        "progress",
        "request",
        "skip",
        "state",
        "transport",
        "we_closed",
    )

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.state = CONNECTING
        self.head = b""
        self.pend = b""
        self.skip = 0
        self.bytes = 0
        self.frames = 0
        self.progress = 0
        self.pings = 0
        self.code: str | None = None  # why it ended: a close code, "abnormal", "handshake 403"
        self.we_closed = False
        loop = asyncio.get_running_loop()
        self.greeted: asyncio.Future[None] = loop.create_future()  # the first frame, or ended
        self.done: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        if self.state != CONNECTING:
            self._frames(data)
            return
        head = self.head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self.head = head
            if len(head) > 16384:
                self._end("handshake garbage")
            return
        self.head = b""
        if head[9:12] != b"101":
            self._end(f"handshake {head[9:12].decode(errors='replace')}")
            return
        self.state = OPEN
        if len(head) > end + 4:
            self._frames(head[end + 4 :])

    def _frames(self, data: bytes) -> None:
        n = len(data)
        self.bytes += n
        skip = self.skip
        if skip:
            if skip >= n:
                self.skip = skip - n
                return
            data = data[skip:]
            self.skip = 0
        if self.pend:
            data = self.pend + data
            self.pend = b""
        pos, end = 0, len(data)
        while end - pos >= 2:
            b1 = data[pos + 1]
            ln = b1 & 127
            h = pos + 2
            if ln == 126:
                if end - pos < 4:
                    break
                ln = (data[pos + 2] << 8) | data[pos + 3]
                h = pos + 4
            elif ln == 127:
                if end - pos < 10:
                    break
                ln = int.from_bytes(data[pos + 2 : pos + 10], "big")
                h = pos + 10
            if b1 & 128:  # a masked server frame: not the protocol
                self._end("protocol error")
                return
            op = data[pos] & 15
            if op & 8:  # control: read whole
                if end - h < ln:
                    break
                self._control(op, data[h : h + ln])
                pos = h + ln
                continue
            if op == 1 and end - h < min(_PLEN, ln):
                break  # wait for the prefix
            self.frames += 1
            if op == 1 and data.startswith(PROGRESS, h):
                self.progress += 1
            if not self.greeted.done():
                self.greeted.set_result(None)
            pos = h + ln
            if pos > end:
                self.skip = pos - end
                return
        if pos < end:
            self.pend = data[pos:]

    def _control(self, op: int, payload: bytes) -> None:
        assert self.transport is not None
        if op == 9:  # PING: a masked PONG with its payload
            self.pings += 1
            if self.state == OPEN:
                self.transport.write(_masked(10, payload))
        elif op == 8:  # CLOSE
            code = str(int.from_bytes(payload[:2], "big")) if len(payload) >= 2 else "1005"
            if self.code is None:
                self.code = code
            if self.state == OPEN:  # the server's: answer it; it then closes the TCP
                self.transport.write(_masked(8, payload[:2]))
            self.state = CLOSING

    def close(self) -> None:
        """Start the closing handshake (1000); the server answers, then drops the TCP."""
        if self.state == OPEN and self.transport is not None:
            self.we_closed = True
            self.state = CLOSING
            self.transport.write(_masked(8, (1000).to_bytes(2, "big")))
        elif self.state == CONNECTING and self.transport is not None:
            self._end("closed connecting")

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(self.code or "abnormal")

    def _end(self, code: str) -> None:
        if self.code is None:
            self.code = code
        self.state = DONE
        if self.transport is not None:
            self.transport.close()
        for fut in (self.greeted, self.done):
            if not fut.done():
                fut.set_result(None)

    def abort(self) -> None:
        if self.transport is not None and self.state != DONE:
            self.transport.abort()


# ---------------------------------------------------------------------------------------------
# The crowd of one process


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


# ---------------------------------------------------------------------------------------------
# The parent's side: the processes, their marks, the figures


@dataclass
class Fleet:
    """``processes`` copies of this module for ``count`` watchers in all, started and stopped
    from bench_game's event loop. :meth:`mark` is synchronous (one line written to each
    child), for bench_game's probes; the marks come back with :meth:`report`."""

    host: str
    port: int
    count: int
    processes: int = 1
    tag: str = "watch"
    connect_concurrency: int = 64
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    ready: list[dict[str, Any]] = field(default_factory=list)
    _events: list[asyncio.Queue[dict[str, Any]]] = field(default_factory=list)
    _readers: list[asyncio.Task[None]] = field(default_factory=list)
    _state: list[dict[str, int]] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def connected(self) -> int:
        return sum(int(r.get("connected", 0)) for r in self.ready)

    async def start(self, on_progress: Callable[[int, int, int], None] | None = None) -> Fleet:
        """Start the children and wait until every socket is open (or failed);
        ``on_progress(created, connected, failed)`` as they go."""
        n = max(1, min(self.processes, self.count))
        shares = [self.count // n + (1 if i < self.count % n else 0) for i in range(n)]
        offset = 0
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            for share in shares:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bench.watchers",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                    "--count",
                    str(share),
                    "--offset",
                    str(offset),
                    "--tag",
                    self.tag,
                    "--connect-concurrency",
                    str(max(1, self.connect_concurrency // n)),
                    cwd=root,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    limit=1 << 28,  # a report is one line: three counters per watcher per mark
                    start_new_session=True,  # a terminal's Ctrl-C reaches only bench_game
                )
                offset += share
                q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
                self.procs.append(proc)
                self._events.append(q)
                self._state.append({"created": 0, "connected": 0, "failed": 0})
                self._readers.append(
                    asyncio.create_task(self._read(proc, q, self._state[-1], on_progress))
                )
            self.ready = [await self._next(i, "ready", None) for i in range(len(self.procs))]
        except BaseException:
            self.kill()
            raise
        return self

    async def _read(
        self,
        proc: asyncio.subprocess.Process,
        q: asyncio.Queue[dict[str, Any]],
        state: dict[str, int],
        on_progress: Callable[[int, int, int], None] | None,
    ) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                await q.put({"event": "exited", "code": await proc.wait()})
                return
            with contextlib.suppress(orjson.JSONDecodeError):
                msg = orjson.loads(line)
                if msg.get("event") == "progress":
                    state.update({k: int(msg[k]) for k in ("created", "connected", "failed")})
                    if on_progress is not None:
                        on_progress(*(sum(s[k] for s in self._state) for k in state))
                else:
                    await q.put(msg)

    async def _next(self, i: int, event: str, timeout: float | None) -> dict[str, Any]:
        msg = await asyncio.wait_for(self._events[i].get(), timeout)
        if msg.get("event") != event:
            raise RuntimeError(f"watcher process {self.procs[i].pid}: {msg} (wanted {event})")
        return msg

    def _send(self, line: bytes) -> None:
        for p in self.procs:
            if p.stdin is not None and not p.stdin.is_closing():
                p.stdin.write(line)

    def mark(self) -> None:
        self._send(b"mark\n")

    async def report(self) -> list[list[dict[str, Any]]]:
        """The marks since the last report: one list per process."""
        self._send(b"report\n")
        return [(await self._next(i, "report", 60))["marks"] for i in range(len(self.procs))]

    async def close(self) -> dict[str, Any]:
        """Every socket closed cleanly (1000) where the server lets it; the children exit."""
        self._send(b"close\n")
        out: dict[str, Any] = {"closing": 0, "clean": 0, "aborted": 0, "cpu_s": 0.0}
        try:
            for i in range(len(self.procs)):
                msg = await self._next(i, "closed", CLOSE_TIMEOUT_S + 20)
                for k in out:
                    out[k] += msg.get(k, 0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in self.procs)), 10)
        finally:
            self.kill()
            await asyncio.gather(*self._readers, return_exceptions=True)
        return out

    def kill(self) -> None:
        """Kill whichever child is still running (on any failure; after a clean close,
        none is)."""
        for p in self.procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()


def figures(
    marks: list[list[dict[str, Any]]], a: int = 0, b: int = 1, c: int = 2
) -> dict[str, Any]:
    """The crowd's figures from marks ``a`` → ``b`` (the load: rates, CPU) and ``a`` → ``c``
    (closes), every process's watchers together."""
    rates_b: list[float] = []
    rates_f: list[float] = []
    rates_p: list[float] = []
    cpu_s = span_sum = 0.0
    frames_total = 0.0
    opened = 0
    closed: Counter[str] = Counter()
    closed_before: Counter[str] = Counter()
    pings = 0
    for pm in marks:
        if len(pm) <= max(a, b, c):
            continue
        m0, m1, m2 = pm[a], pm[b], pm[c]
        span = max(1e-9, m1["t"] - m0["t"])
        span_sum += span
        cpu_s += m1["cpu_s"] - m0["cpu_s"]
        for key, out in (("bytes", rates_b), ("frames", rates_f), ("progress", rates_p)):
            out.extend((y - x) / span for x, y in zip(m0[key], m1[key], strict=True))
        frames_total += (sum(m1["frames"]) - sum(m0["frames"])) / span
        opened += m1["open"]
        after = Counter(m2["closed"])
        after.subtract(Counter(m0["closed"]))
        closed.update({k: v for k, v in after.items() if v > 0})
        closed_before.update(m0["closed"])
        pings += m2["pings"] - m0["pings"]
    n = max(1, len(rates_b))
    span = span_sum / max(1, len(marks))
    return {
        "watchers": len(rates_b),
        "open_at_load_end": opened,
        "span_s": round(span, 3),
        "bytes_per_s": {
            "mean": round(sum(rates_b) / n, 1),
            "max": round(max(rates_b, default=0.0), 1),
        },
        "frames_per_s": {
            "mean": round(sum(rates_f) / n, 2),
            "max": round(max(rates_f, default=0.0), 2),
        },
        "frames_per_s_all": round(frames_total, 1),
        "progress_per_s": {
            "mean": round(sum(rates_p) / n, 2),
            "max": round(max(rates_p, default=0.0), 2),
        },
        "closed": dict(closed),  # in the window (first send to drained), by code
        # since they connected, before this window (earlier rates, the warm-up)
        "closed_before": dict(closed_before),
        "pings_answered": pings,
        # the watcher processes' own CPU during the load, summed
        "cpu_ms_per_s": round(cpu_s * 1000 / max(1e-9, span), 1),
        "core_share": round(cpu_s / max(1e-9, span), 4),
    }


if __name__ == "__main__":
    sys.exit(main())
