"""The floor of this stack: the game's work done by the barest code on the game's parts.

    uv run python -m bench.bench_floor [--rates 300,1000,2000] [--duration 10] [--workers 2]
        [--players 200] [--sockets N] [--batch 64] [--warmup 2] [--schedule poisson|uniform]
        [--json OUT] [--quiet]

A guess in the game is an HTTP request that is authenticated, queued in Valkey, answered
``202``, popped by a worker, scored, written to SQLite, completed in Valkey and pushed to the
player's websocket. This benchmark does exactly those steps with nothing around them, on the
same libraries and settings, and prints the CPU each role spends per accepted guess. Those
figures are the physical limit of this stack on this machine, so the game's own figures
(``bench_game``) read best as ratios to them.

The processes, each measured from ``/proc/<pid>/stat`` from the first send until the drain ends:

- **web floor** (``python -m bench.bench_floor serve-web``): uvicorn with the game's settings
  (httptools, uvloop, websockets-sansio, the game's frame cap, no permessage-deflate, its
  ping interval and keep-alive) serving a bare ASGI callable. ``POST /api/guesses`` reads the
  body, decodes its JSON, looks the bearer token up in a dict, runs one EVALSHA (``HSET`` the
  job, ``LPUSH`` it) and answers ``202`` with ``{"job_id": …}``. It holds one websocket per
  player, subscribes to the scores channel and writes one text frame per scored guess.
- **worker floor** (``python -m bench.bench_floor work``, ``--workers`` of them): BLMPOP up to
  ``--batch`` jobs, scores them (Mastermind's exact/misplaced count), writes them in one
  SQLite transaction (``INSERT OR IGNORE`` into a table keyed on the job id; WAL, the
  default ``synchronous``, the game's busy timeout, as ``codemojex.store.db``), then one
  EVALSHA that deletes the batch's jobs from the hash and PUBLISHes the batch's scores.
- **Valkey**: the embedded server with the game's durability (``appendfsync always``).
- **load client**: this process. Open loop at each rate (the seeded schedule of
  ``bench_game``, whose keep-alive raw-HTTP pool it reuses), plus one websocket per player
  reading the scores on the websockets library's sans-I/O protocol.

What the floor omits, so that a ratio to it reads right (each is a guarantee or a feature
the game pays for): the door (admission, body deadlines, per-address and per-player
buckets, cross-site checks, the connection guard), routing and middleware (Starlette),
validation of the guess against the round, rounds and their closing, idempotency keys,
EchoMQ's job model (fair lanes, leases with fencing tokens and their renewals, retries,
dead letters, scheduled jobs, the events stream, progress counters), the standings upsert
in the score transaction and the single-writer lock between workers, the hub's broadcast
(progress messages to every socket), traces, metrics and logs. Completion and the score
publish share one script call here, and job ids are a per-process counter. PostgreSQL is
not covered: the floor is SQLite's.

Per rate it prints accepted/s and scored/s (within the window), accept→score p50/p99,
guesses per worker batch (from Valkey's ``HDEL`` count: one per completion), and CPU ms per
accepted guess for web, workers, Valkey, their sum (server) and the client, plus the cores
that processes not ours used meanwhile: on a shared machine the figures are only as quiet
as it. Like ``bench_game`` it is longer than the house's ~400 lines: a benchmark reads best
whole, its servers, client and report together.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import math
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs

import orjson
import redis
import redis.asyncio as aioredis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from bench.common import (
    ROOT,
    embedded_server,
    machine,
    machine_busy_seconds,
    proc_cpu_seconds,
    signals_raise_keyboardinterrupt,
)
from bench.game.http import Guess, Pool, Window, encode_request
from bench.game.player_socket import send_offsets
from codemojex.mash.ledger import percentile as pct
from codemojex.store.db import SQLITE_BUSY_TIMEOUT_MS

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

T = TypeVar("T")

console = Console() if sys.stdout.isatty() else Console(width=160)
now = time.perf_counter

QUEUE = "floor:queue"
JOBS = "floor:jobs"
SCORES = "floor:scores"
# KEYS: jobs hash, queue; ARGV: job id, job. The job is kept in a hash as the game keeps it
# in Valkey until it completes; the list carries it to a worker.
ENQUEUE = (
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('LPUSH', KEYS[2], ARGV[2])"
)
# KEYS: jobs hash, scores channel; ARGV: the batch's scores, then its job ids.
COMPLETE = (
    "redis.call('HDEL', KEYS[1], unpack(ARGV, 2)) return redis.call('PUBLISH', KEYS[2], ARGV[1])"
)
SECRET = ("🍎", "🍌", "🍒", "🍇")
EMOJIS = ("🍎", "🍌", "🍒", "🍇", "🍉", "🍋", "🍑", "🍍")
DRAIN_S = 15.0
WARMUP_RATE = 100.0


def token_of(player: int) -> str:
    """Both sides derive the players' tokens, so no sign-up step is needed."""
    return f"floor-{player:06d}-token"


# ---------------------------------------------------------------------------------------------
# The web floor: a bare ASGI callable under the game's uvicorn settings


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


# ---------------------------------------------------------------------------------------------
# The worker floor: a batch per pop, per transaction, per completion


def mastermind(secret: tuple[str, ...], guess: list[str]) -> tuple[int, int]:
    """(right emoji in the right place, right emoji in the wrong place)."""
    exact = sum(a == b for a, b in zip(secret, guess, strict=False))
    common = sum(min(secret.count(e), guess.count(e)) for e in set(guess))
    return exact, common - exact


def open_db(path: str) -> sqlite3.Connection:
    """The game's SQLite settings (codemojex.store.db): WAL, its busy timeout, explicit BEGIN."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute(
        "CREATE TABLE IF NOT EXISTS scores (job_id TEXT PRIMARY KEY, player TEXT NOT NULL,"
        " guess TEXT NOT NULL, exact INTEGER NOT NULL, near INTEGER NOT NULL)"
    )
    return db


async def work(redis_url: str, db_path: str, batch: int) -> None:
    conn = aioredis.from_url(redis_url)
    sha = await conn.script_load(COMPLETE)
    db = open_db(db_path)
    print("READY", flush=True)
    while True:
        got = await conn.blmpop(1, 1, QUEUE, direction="RIGHT", count=batch)
        if not got:
            continue
        rows, scores = [], []
        for raw in cast(list[bytes], got[1]):
            job_id, player, guess = orjson.loads(raw)
            exact, near = mastermind(SECRET, guess)
            rows.append((job_id, player, "".join(guess), exact, near))
            scores.append((player, job_id, exact, near))
        # In the loop's thread: nothing else is waiting on this loop while it commits.
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO scores VALUES (?, ?, ?, ?, ?)", rows)
        db.execute("COMMIT")
        ids = [r[0] for r in rows]
        await conn.evalsha(sha, 2, JOBS, SCORES, orjson.dumps(scores), *ids)


# ---------------------------------------------------------------------------------------------
# The load client's sockets


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


# ---------------------------------------------------------------------------------------------
# The load client


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


# ---------------------------------------------------------------------------------------------
# Orchestration: the processes, their CPU, the figures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.bench_floor", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        process_group=0,  # a terminal's Ctrl-C reaches only us; we stop the children
    )


def wait_port(port: int, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the web floor exited early (code {proc.returncode})")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError("the web floor did not listen in time")


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "READY":
        raise RuntimeError(f"a worker floor exited early (code {proc.wait()})")


@contextlib.contextmanager
def floor_processes(redis_url: str, players: int, workers: int, batch: int) -> Iterator[Stack]:
    procs: list[subprocess.Popen[str]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="floor-db-") as tmp:
            port = free_port()
            web = child("serve-web", "--redis-url", redis_url, "--port", str(port),
                        "--players", str(players))  # fmt: skip
            procs.append(web)
            db = str(Path(tmp) / "floor.db")
            open_db(db).close()  # the schema and WAL once, before workers race for it
            for _ in range(workers):
                procs.append(child("work", "--redis-url", redis_url, "--db", db,
                                   "--batch", str(batch)))  # fmt: skip
            wait_port(port, web)
            for p in procs[1:]:
                wait_ready(p)
            yield Stack(port, web.pid, [p.pid for p in procs[1:]])
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


@dataclass
class Stack:
    port: int
    web: int
    workers: list[int]
    valkey: int = 0
    valkey_url: str = ""

    def cpu(self) -> dict[str, float]:
        def of(pid: int) -> float:
            return proc_cpu_seconds(pid) or 0.0

        # Each completion runs one HDEL: its count is the workers' batches. Read only at the
        # marks, never during the load.
        with redis.Redis.from_url(self.valkey_url) as conn:
            stats = cast(dict[str, Any], conn.info("commandstats"))
        return {
            "batches": float(stats.get("cmdstat_hdel", {}).get("calls", 0)),
            "web": of(self.web),
            "worker": sum(of(p) for p in self.workers),
            "valkey": of(self.valkey),
            "client": of(os.getpid()),
            "machine": machine_busy_seconds(),
            "t": now(),
        }


def figures(w: Window, marks: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The window's rates and latencies, and CPU ms per accepted guess by role from the first
    send until the drain ended (each role's core share over the load beside it)."""
    end = w.t0 + w.duration
    accepted = [g for g in w.guesses if g.status == 202]
    scored = [g for g in accepted if g.scored is not None]
    a2s = sorted(max(0.0, cast(float, g.scored) - cast(float, g.answered)) for g in scored)
    start, loaded, last = marks["start"], marks["loaded"], marks["end"]
    per = max(1, len(accepted))
    span = max(1e-9, loaded["t"] - start["t"])
    cpu = {
        role: {
            "ms_per_guess": round((last[role] - start[role]) * 1000 / per, 4),
            "core_share": round((loaded[role] - start[role]) / span, 3),
        }
        for role in ("web", "worker", "valkey", "client")
    }
    server = sum(cpu[r]["ms_per_guess"] for r in ("web", "worker", "valkey"))
    ours = sum(loaded[r] - start[r] for r in ("web", "worker", "valkey", "client"))
    return {
        "rate": w.rate,
        "duration_s": w.duration,
        "sent": len(w.guesses),
        "accepted": len(accepted),
        "scored": len(scored),
        "refused_or_failed": len(w.guesses) - len(accepted),
        "duplicate_scores": sum(g.scores - 1 for g in scored if g.scores > 1),
        "drained": w.drained,
        "pipelined": w.pipelined,
        "jobs_per_batch": round(len(accepted) / max(1.0, last["batches"] - start["batches"]), 2),
        "accepted_per_s": round(
            sum(1 for g in accepted if (g.answered or 0) <= end) / w.duration, 1
        ),
        "scored_per_s": round(sum(1 for g in scored if (g.scored or 0) <= end) / w.duration, 1),
        "accept_to_score_ms": {"p50": _ms(pct(a2s, 50)), "p99": _ms(pct(a2s, 99))},
        "cpu": cpu,
        "server_ms_per_guess": round(server, 4),
        "others_cores": round(max(0.0, loaded["machine"] - start["machine"] - ours) / span, 3),
        "loadavg_1m": os.getloadavg()[0],
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


async def run_rates(opts: argparse.Namespace, stack: Stack) -> list[dict[str, Any]]:
    client = Client("127.0.0.1", stack.port, opts.players)
    await client.connect(opts.sockets)
    if opts.warmup > 0:  # scripts loaded, SQLite's pages and the pool's paths warm; unrecorded
        await client.offer(WARMUP_RATE, opts.warmup, opts.schedule, lambda _: None)
    rows = []
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=opts.quiet,
            transient=True,
        ) as progress:
            for rate in opts.rates:
                task = progress.add_task(f"{rate:g}/s", total=round(rate * opts.duration))
                ticker = asyncio.create_task(_tick(progress, task, client))
                marks: dict[str, dict[str, float]] = {}
                try:
                    w = await client.offer(
                        rate,
                        opts.duration,
                        opts.schedule,
                        mark_into(marks, stack),
                        opts.connections,
                    )
                finally:
                    ticker.cancel()
                rows.append(figures(w, marks))
                progress.remove_task(task)
                client.jobs.clear()
                client.early.clear()
    finally:
        client.close()
    return rows


def mark_into(marks: dict[str, dict[str, float]], stack: Stack) -> Callable[[str], None]:
    """The probe: each role's CPU so far, under the moment's name."""

    def mark(name: str) -> None:
        marks[name] = stack.cpu()

    return mark


async def _tick(progress: Progress, task: Any, client: Client) -> None:
    while True:
        if client.window is not None:
            progress.update(task, completed=len(client.window.guesses))
        await asyncio.sleep(0.25)


def print_table(rows: list[dict[str, Any]], title: str, out: Console | None = None) -> None:
    out = out or console
    table = Table(title=title)
    columns = ("offered", "accepted/s", "scored/s", "a→s p50/p99 ms", "per batch")
    for name in (*columns, "web", "worker", "valkey", "server", "client", "others"):
        table.add_column(name, justify="right")
    for r in rows:
        c = r["cpu"]
        a2s = r["accept_to_score_ms"]
        table.add_row(
            f"{r['rate']:g}/s",
            f"{r['accepted_per_s']:.0f}",
            f"{r['scored_per_s']:.0f}",
            f"{a2s['p50']} / {a2s['p99']}",
            f"{r['jobs_per_batch']:.1f}",
            *(f"{c[k]['ms_per_guess']:.3f}" for k in ("web", "worker", "valkey")),
            f"[bold]{r['server_ms_per_guess']:.3f}[/]",
            f"{c['client']['ms_per_guess']:.3f}",
            f"{r['others_cores']:.2f}",
        )
    out.print(table)
    out.print(
        "CPU in ms per accepted guess, first send to drain end; server = web + worker + valkey;"
        " per batch = guesses per worker transaction; others = cores that processes not ours"
        " used during the load."
    )


def measure(opts: argparse.Namespace) -> dict[str, Any]:
    with embedded_server("always") as server:
        with floor_processes(server.url, opts.players, opts.workers, opts.batch) as stack:
            stack.valkey, stack.valkey_url = server.pid or 0, server.url
            rows = _runner()(run_rates(opts, stack))
        with redis.Redis.from_url(server.url) as conn:
            info = conn.info("server")
    return {"machine": machine(info), "options": _options(opts), "rows": rows}


def _runner() -> Callable[[Coroutine[Any, Any, T]], T]:
    """uvloop's runner where installed (the game's processes and bench_game's client use it)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency on Linux
        return asyncio.run
    return uvloop.run


def _options(opts: argparse.Namespace) -> dict[str, Any]:
    keep = (
        "rates",
        "duration",
        "warmup",
        "connections",
        "workers",
        "players",
        "sockets",
        "batch",
        "schedule",
    )
    return {k: getattr(opts, k) for k in keep}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench.bench_floor", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command")
    web = sub.add_parser("serve-web", help="(internal) the web floor process")
    web.add_argument("--redis-url", required=True)
    web.add_argument("--port", type=int, required=True)
    web.add_argument("--players", type=int, required=True)
    wk = sub.add_parser("work", help="(internal) a worker floor process")
    wk.add_argument("--redis-url", required=True)
    wk.add_argument("--db", required=True)
    wk.add_argument("--batch", type=int, required=True)
    ap.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")],
                    default=[300.0, 1000.0, 2000.0])  # fmt: skip
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0, help=f"s at {WARMUP_RATE:g}/s first")
    ap.add_argument("--connections", type=int, default=64, help="HTTP keep-alive, at most")
    ap.add_argument("--workers", type=int, default=2, help="as `up`'s default")
    ap.add_argument("--players", type=int, default=200)
    ap.add_argument("--sockets", type=int, default=None, help="players with a socket (all)")
    ap.add_argument("--batch", type=int, default=64, help="jobs per pop, transaction, completion")
    ap.add_argument("--schedule", choices=("poisson", "uniform"), default="poisson")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quiet", action="store_true")
    opts = ap.parse_args(argv)
    if opts.command is None:
        opts.sockets = opts.players if opts.sockets is None else min(opts.sockets, opts.players)
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.command == "serve-web":
        serve_web(opts.redis_url, opts.port, opts.players)
        return 0
    if opts.command == "work":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with contextlib.suppress(KeyboardInterrupt):
            _runner()(work(opts.redis_url, opts.db, opts.batch))  # uvloop, as the game's workers
        return 0
    signals_raise_keyboardinterrupt()
    result = measure(opts)
    m = result["machine"]
    print_table(result["rows"], f"The floor: {m['cores']} cores, {m['cpu']}, Valkey {m['valkey']}")
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
