"""The game path's speed: open-loop guesses against ``codemojex up``; prints figures, asserts nothing.

    uv run python -m bench.bench_game [--rates 100,300,1000,2000] [--duration 10] [--workers 2]
        [--players 200] [--postgres | --database-url postgresql://…] [--up-arg=--concurrency=8]
        [--watchers N[,M…] [--watcher-processes K]] [--web-processes 1[,2]]
        [--json OUT] [--html OUT]

Starts a fresh ``codemojex up`` (embedded Valkey, SQLite unless told otherwise, N workers),
creates the players, opens one websocket per player, and offers each rate for ``--duration``
seconds, then waits (``--drain``) for the scores of every accepted guess. The load is open
loop: the send times come from a seeded schedule (Poisson or uniform) fixed before the window
starts, never from the answers, and each send goes to the next player in turn (or a random
one), so each player offers ``rate / players`` guesses a second.

The client is kept light so that its own CPU, printed beside the server's, stays a small
share, and its timing honest: one process on uvloop (if installed), raw HTTP/1.1 keep-alive
requests pre-encoded as bytes on a pool of connections (a send that finds none idle is
pipelined behind an unanswered request rather than delayed: the schedule holds, and the count
is printed), answers and websocket frames parsed in ``data_received`` (no task or future per
message; websockets' sans-I/O protocol, no ``Origin`` header) and timestamped there, only the
status line, ``Content-Length`` and the bodies of ``202`` and of errors looked at, websocket
messages decoded only when they are a ``score`` or a ``round``; no collector pause and no
refresh thread inside a window (the progress bars are redrawn from the loop).

Per guess it records the scheduled and actual send time, the answer's arrival and the
score's arrival on its owner's socket (matched by job id; a score may beat the ``202``).
Per rate: accepted/s and scored/s over the window, refusals by error code, accept→score
(``202`` received → score on the socket) percentiles, send→``202`` p99, the client's send
lag (past 5 ms p99 the arrivals were burstier than the schedule, and the report says so),
and CPU milliseconds per accepted guess for every process of ``up`` (web, each worker,
Valkey, the supervisor), a throwaway PostgreSQL (``--postgres``) and the client itself, read
from ``/proc/<pid>/stat`` from the first send until the drain ends, with each one's share of
a core during the load. On a shared machine the figures are only as quiet as the machine, so
it prints the CPU that processes not ours used, how long each main thread waited runnable for
a CPU (``/proc/<pid>/schedstat``), and the websocket traffic the players received.

``--watchers N`` holds a crowd: N more players whose sockets only read, from a client of
their own (``bench/watchers.py``, one process per 5,000 by default, at most 2, on raw
asyncio protocols) so that its CPU is printed apart. They sign up (``up`` runs with
``CODEMOJEX_PLAYER_RATE=0``, ``CODEMOJEX_SOCKETS_PER_PROCESS=0`` and
``CODEMOJEX_SOCKETS_PER_ADDRESS=0``) and connect at a bounded concurrency before the first
window; then they send nothing but PONGs to the server's pings, and close 1000 at the end.
Per rate, beside the figures above: bytes and frames a second per watcher over the load
(mean, max over watchers; bytes as on the wire, frame headers included), frames a second all
watchers together, ``progress`` messages a second per watcher, the watchers the server
closed (by close code), the watcher processes' CPU (ms a second, share of a core), and the
web processes' resident set per socket: (VmRSS with the crowd connected − before it
connected) ÷ its sockets, idle before the first window and at the load's end.
``--watchers 0,9800`` and ``--web-processes 1,2`` take lists: every pair is a configuration,
measured in turn (everything above, each on its own fresh ``up``), web processes in the outer
loop and watchers in the inner one (1 web with 0 watchers, 1 web with 9,800, 2 web with 0,
2 web with 9,800), and printed side by side with each one's ratio to the first
("1 web, 0 watchers"): web CPU per guess, accept→score p50/p99 and scored/s with and without
a crowd, read off one run. When any configuration has a crowd, every one runs with the
crowd's ``CODEMOJEX_*`` settings, so that the crowd is all that differs; a configuration with
0 watchers starts no watcher process and leaves the crowd's figures blank.

When a rate's backlog does not drain in time, the next rate runs on a fresh ``up`` so one
rate's queue never leaks into the next. A round that closes mid-window is followed (the
``round`` message, or a ``409 round_closed`` that refetches it); use ``--round-seconds`` to
keep closes rare. This module is longer than the house's ~400 lines because a benchmark
reads best whole: client, probe and report together.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import html
import itertools
import logging
import math
import os
import random
import re
import shlex
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlsplit

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from bench.common import (
    machine,
    machine_busy_seconds,
    png_data_uri,
    proc_argv,
    proc_cpu_seconds,
    proc_parent,
    proc_rss_kb,
    proc_runqueue_wait_seconds,
    signals_raise_keyboardinterrupt,
)
from bench.watchers import Fleet, raise_nofile
from bench.watchers import figures as watcher_figures
from codemojex.mash.ledger import percentile as pct
from harness.running import Up, descendants

try:  # the client's loop; the server's processes choose their own
    import uvloop
except ImportError:  # pragma: no cover - a dependency on Linux
    uvloop = None  # type: ignore[assignment]

console = Console() if sys.stdout.isatty() else Console(width=200)
now = time.perf_counter  # every client timestamp: one monotonic clock

LAG_OK_MS = 5.0  # a client whose send lag p99 passes this did not offer the load asked for
SCORED_OK = 0.95  # scored/s must reach this share of offered/s (issue 9)
REQUEST_TIMEOUT_S = 15.0
_TYPE = re.compile(rb'"type":\s*"([a-z_]+)"')
# A socket's error frames carry the code of the HTTP answer they stand for, not its status.
_FRAME_STATUS = {"rate_limited": 429, "lane_full": 429, "overloaded": 503, "unavailable": 503}


# ---------------------------------------------------------------------------------------------
# Options


@dataclass
class Options:
    rates: list[float] = field(default_factory=lambda: [100.0, 300.0, 1000.0, 2000.0])
    duration: float = 10.0
    drain: float = 30.0  # seconds to wait after the load for every accepted guess's score
    warmup: float = 2.0  # seconds at a low rate before the first window, not recorded
    players: int = 200
    connections: int = 64
    schedule: str = "poisson"  # or "uniform"
    pick: str = "round-robin"  # or "random"
    seed: int = 1
    fresh_each_rate: bool = False
    progress: bool = True
    watchers: int = 0  # extra players whose sockets only read (bench/watchers.py)
    watcher_processes: int = 0  # 0: one per 5,000 watchers, at most 2
    watcher_concurrency: int = 64  # sockets being opened at once
    via: str = "http"  # or "socket": each guess a frame on its player's websocket


WATCHERS_PER_PROCESS = 5_000


def watcher_processes(opts: Options) -> int:
    if opts.watcher_processes > 0:
        return opts.watcher_processes
    return max(1, min(2, math.ceil(opts.watchers / WATCHERS_PER_PROCESS)))


def up_env(opts: Options, crowd: bool | None = None) -> dict[str, str]:
    """``CODEMOJEX_*`` variables for ``up``: a crowd needs the per-address limits lifted
    (every watcher signs up and connects from 127.0.0.1) and no per-process socket cap.
    ``crowd`` (default: ``opts.watchers`` is not 0) asks for them without one, so that a
    configuration with 0 watchers runs the same server as the one with a crowd it is
    compared with. A variable a server does not know is ignored (an older ``--baseline``
    has fewer)."""
    if not (opts.watchers > 0 if crowd is None else crowd):
        return {}
    return {
        "CODEMOJEX_PLAYER_RATE": "0",
        "CODEMOJEX_SOCKETS_PER_PROCESS": "0",
        "CODEMOJEX_SOCKETS_PER_ADDRESS": "0",
        "CODEMOJEX_CONNECTIONS_PER_ADDRESS": "0",
        # the watchers' handshakes count at the door beside the load's guesses
        "CODEMOJEX_ADDRESS_IN_FLIGHT": "0",
    }


class BenchUp(Up):
    """tests/cli's ``Up``, with ``CODEMOJEX_*`` variables of our own on top of the clean
    environment it gives ``up`` (it drops the caller's, so a developer's shell cannot leak
    into a test)."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None, **kw: Any):
        super().__init__(data_dir, *args, **kw)
        self.extra_env = dict(env or {})

    def start(self) -> Up:
        import subprocess

        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
        env.update(self.extra_env)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=self.root,
                process_group=0,
            )
        return self


def start_up(data_dir: Path, *args: str, env: dict[str, str], root: Path | None = None) -> Up:
    """A ready ``up``; everything it started is killed if it does not get ready."""
    up = BenchUp(data_dir, *args, env=env, **({"root": root} if root else {}))
    try:
        return up.start().wait_ready(60)
    except BaseException:
        up.kill_everything()
        raise


def web_rss_kb(roles: dict[int, str]) -> tuple[int, int]:
    """(the web processes' resident sets summed in KiB, how many web processes)."""
    rss = [proc_rss_kb(pid) for pid, role in roles.items() if role == "web"]
    got = [r for r in rss if r is not None]
    return sum(got), len(got)


# ---------------------------------------------------------------------------------------------
# Raw HTTP/1.1


class HttpError(Exception):
    """A setup call got an answer the benchmark cannot go on with."""


def encode_request(
    method: str,
    path: str,
    host: str,
    body: bytes | None = None,
    token: str | None = None,
    close: bool = False,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, the server will close): the status line, ``Content-Length`` and the
    body's bytes; no other header is looked at but ``Connection: close``."""
    head = (await reader.readuntil(b"\r\n\r\n")).lower()
    status = int(head[9:12])
    i = head.find(b"\r\ncontent-length:")
    if i < 0:
        if b"\r\ntransfer-encoding:" in head:
            raise ValueError("chunked answers are not expected from this server")
        n = 0
    else:
        n = int(head[i + 17 : head.index(b"\r\n", i + 17)])
    body = await reader.readexactly(n) if n else b""
    return status, body, b"\r\nconnection: close" in head


async def http_once(
    host: str, port: int, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    """One request on a fresh connection (setup and control only): (status, decoded JSON)."""
    data = None if body is None else orjson.dumps(body)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    try:
        writer.write(encode_request(method, path, f"{host}:{port}", data, token, close=True))
        status, raw, _ = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT_S)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    try:
        return status, orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return status, raw.decode(errors="replace")


# ---------------------------------------------------------------------------------------------
# One guess, one window


class Guess:
    __slots__ = (
        "answered",
        "error",
        "job_id",
        "player",
        "scheduled",
        "scored",
        "scored_on",
        "scores",
        "sent",
        "status",
        "window",
    )

    def __init__(self, window: Window, player: int, scheduled: float) -> None:
        self.window = window
        self.player = player
        self.scheduled = scheduled
        self.sent = 0.0
        self.answered: float | None = None
        self.status = 0
        self.error: str | None = None
        self.job_id: str | None = None
        self.scored: float | None = None
        self.scored_on: int | None = None
        self.scores = 0  # how many score messages named its job: exactly one is right


@dataclass
class Window:
    rate: float
    duration: float
    planned: int = 0  # sends in the schedule
    t0: float = 0.0
    load_end: float = 0.0  # the last send
    drain_end: float = 0.0
    guesses: list[Guess] = field(default_factory=list)
    answered: int = 0
    accepted: int = 0
    scored: int = 0
    pipelined: int = 0  # sends that found no idle connection
    score_before_202: int = 0
    drained: bool = False
    backlog: dict[str, int] | None = None  # the queue at the end of the load
    ws_messages: Counter[str] = field(default_factory=Counter)
    ws_bytes: Counter[str] = field(default_factory=Counter)
    ws_closes: Counter[str] = field(default_factory=Counter)


# ---------------------------------------------------------------------------------------------
# The connection pool: open loop, pipelining rather than waiting


class HttpConn(asyncio.Protocol):
    """One keep-alive connection. Answers are parsed in ``data_received`` (no task or
    coroutine per answer) and timestamped on arrival; they come back in the order sent."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.pending: deque[Guess] = deque()
        self.buf = b""
        self.alive = True
        self.idle = False  # in the pool's idle queue
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        t = now()
        buf = self.buf + data if self.buf else data
        pos, close = 0, False
        try:
            while not close:
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0:
                    break
                head = buf[pos:end].lower()
                i = head.find(b"\r\ncontent-length:")
                if i < 0:
                    n = 0
                else:
                    j = head.find(b"\r\n", i + 17)
                    n = int(head[i + 17 : j if j >= 0 else len(head)])
                if len(buf) < end + 4 + n:
                    break
                self.pool.answer(
                    self.pending.popleft(), int(head[9:12]), buf[end + 4 : end + 4 + n], t
                )
                pos = end + 4 + n
                close = b"\r\nconnection: close" in head
        except (ValueError, IndexError, KeyError):  # nonsense, or an answer to nothing asked
            close = True
        self.buf = buf[pos:]
        if close:
            self.pool.lost(self)
        elif not self.pending and not self.idle:
            self.idle = True
            self.pool.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.lost(self)  # the server closed it (its keep-alive timeout) or it broke


class Pool:
    """``n`` keep-alive connections; :meth:`send` writes pre-encoded bytes on an idle one, or
    pipelines them on the next busy one, so a send is never delayed by an answer."""

    def __init__(
        self, host: str, port: int, answer: Callable[[Guess, int, bytes, float], None]
    ) -> None:
        self.host, self.port, self.answer = host, port, answer
        self.conns: list[HttpConn] = []
        self.idle: deque[HttpConn] = deque()
        self.rr = 0
        self.closing = False
        self._reopening: set[asyncio.Task[None]] = set()

    async def open(self, n: int) -> Pool:
        await asyncio.gather(*(self._add() for _ in range(n)))
        return self

    async def _add(self) -> None:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: HttpConn(self), self.host, self.port)
        self.conns.append(conn)
        conn.idle = True
        self.idle.append(conn)

    def send(self, data: bytes, guess: Guess) -> None:
        if self.idle:
            conn = self.idle.popleft()
            conn.idle = False
        elif self.conns:
            conn = self.conns[self.rr % len(self.conns)]
            self.rr += 1
            guess.window.pipelined += 1
        else:
            self.answer(guess, 0, b"no_connection", now())
            return
        conn.pending.append(guess)
        assert conn.transport is not None
        conn.transport.write(data)

    def lost(self, conn: HttpConn) -> None:
        if not conn.alive:
            return
        conn.alive = False
        with contextlib.suppress(ValueError):
            self.conns.remove(conn)
        if conn.idle:
            conn.idle = False
            self.idle.remove(conn)
        if conn.transport is not None:
            conn.transport.close()
        if self.closing:
            return  # what is still pending stays unanswered
        t = now()
        while conn.pending:
            self.answer(conn.pending.popleft(), 0, b"connection_lost", t)
        if not self.closing:
            task = asyncio.create_task(self._add())
            self._reopening.add(task)
            task.add_done_callback(self._reopening.discard)

    async def close(self) -> None:
        self.closing = True
        for task in self._reopening:
            task.cancel()
        await asyncio.gather(*self._reopening, return_exceptions=True)
        for conn in list(self.conns):
            self.lost(conn)


# ---------------------------------------------------------------------------------------------
# The client: players, their sockets, the offered load


@dataclass
class Player:
    index: int
    player_id: str
    token: str
    prefix: bytes  # the guess request up to its Content-Length
    greeted: asyncio.Event = field(default_factory=asyncio.Event)
    sock: Socket | None = None
    after: str | None = None  # the last event id seen: a reconnect resumes from it


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


class Socket(asyncio.Protocol):
    """One player's websocket on the ``websockets`` library's sans-I/O protocol: frames are
    parsed in ``data_received`` and timestamped there, with no task or future per message,
    so 200 sockets' bursts of progress messages cost the client little and delay no score's
    timestamp behind a queue of wake-ups. No ``Origin`` header: a non-browser client."""

    def __init__(self, client: GameClient, player: Player, uri: str) -> None:
        self.client, self.player = client, player
        self.proto = ClientProtocol(parse_uri(uri), max_size=1 << 24)
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.parts: list[bytes] = []  # a fragmented text message so far
        self.sent: collections.deque[Guess] = collections.deque()  # guess frames unanswered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it
        self.proto.send_request(self.proto.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        t = now()
        self.proto.receive_data(data)
        for event in self.proto.events_received():
            if isinstance(event, Response):  # the handshake's
                if self.proto.handshake_exc is not None:
                    self._done(f"handshake {event.status_code}")
                continue
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.TEXT or (event.opcode is Opcode.CONT and self.parts):
                if not event.fin:
                    self.parts.append(bytes(event.data))
                    continue
                text = b"".join([*self.parts, event.data]) if self.parts else bytes(event.data)
                self.parts = []
                self.client.message(self.player, text, t)
        self._flush()

    def eof_received(self) -> bool | None:
        self.proto.receive_eof()
        self._flush()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._done(str(self.proto.close_code or "abnormal"))

    def send_guess(self, frame: bytes, guess: Guess) -> bool:
        """Send one guess frame; False if the socket is not open."""
        if self.transport is None or self.transport.is_closing() or self.closed.done():
            return False
        self.sent.append(guess)
        self.proto.send_text(frame)
        self._flush()
        return True

    def close(self) -> None:
        """Start the closing handshake (code 1000)."""
        if self.transport is not None and not self.closed.done():
            with contextlib.suppress(Exception):
                self.proto.send_close(1000)
            self._flush()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _flush(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        for data in self.proto.data_to_send():
            if data:
                self.transport.write(data)
            elif self.transport.can_write_eof():
                self.transport.write_eof()  # the protocol's SEND_EOF: half-close

    def _done(self, code: str) -> None:
        if not self.closed.done():
            self.closed.set_result(code)
        if self.transport is not None and code.startswith("handshake"):
            self.transport.close()


def send_offsets(rate: float, duration: float, kind: str, rng: random.Random) -> list[float]:
    """Send times (s from the window's start): evenly spaced, or Poisson arrivals."""
    if kind == "uniform":
        return [i / rate for i in range(round(rate * duration))]
    out, t = [], rng.expovariate(rate)
    while t < duration:
        out.append(t)
        t += rng.expovariate(rate)
    return out


# ---------------------------------------------------------------------------------------------
# CPU per process, from /proc


def role_of(pid: int, up_pid: int) -> str | None:
    """``up``, ``web``, ``worker``, ``valkey``, ``postgres``; None: ask its parent."""
    if pid == up_pid:
        return "up"
    argv = proc_argv(pid)
    if not argv:
        return None
    first = argv[0]
    if "valkey-server" in first or "redis-server" in first:
        return "valkey"
    if Path(first.split()[0]).name == "postgres" or first.startswith("postgres:"):
        return "postgres"
    for tok, nxt in itertools.pairwise(argv):
        if (tok == "codemojex" or tok.endswith("/codemojex")) and nxt in ("web", "worker", "up"):
            return nxt
    return None


class Processes:
    """The pids to watch and what each one is: ``up``'s tree, extra trees (a throwaway
    PostgreSQL), and this client."""

    def __init__(self, up_pid: int, extra: Mapping[str, int | list[int]] | None = None) -> None:
        self.up_pid = up_pid
        self.extra = extra or {}  # role: the root pid(s) of its trees

    def roles(self) -> dict[int, str]:
        found = {self.up_pid} | descendants(self.up_pid)
        roles: dict[int, str] = {}

        def role(pid: int, depth: int = 0) -> str:
            if pid in roles:
                return roles[pid]
            r = role_of(pid, self.up_pid)
            if r is None:
                parent = proc_parent(pid)
                r = role(parent, depth + 1) if parent in found and depth < 8 else "other"
            roles[pid] = r
            return r

        for pid in sorted(found):
            role(pid)
        for name, roots in self.extra.items():
            for root in [roots] if isinstance(roots, int) else roots:
                for pid in {root} | descendants(root):
                    roles[pid] = name
        roles[os.getpid()] = "client"
        return roles

    def snapshot(self) -> CpuSnapshot:
        roles = self.roles()
        cpu = {pid: proc_cpu_seconds(pid) for pid in roles}
        wait = {pid: proc_runqueue_wait_seconds(pid) for pid in roles}
        return CpuSnapshot(
            now(),
            machine_busy_seconds(),
            roles,
            {pid: c for pid, c in cpu.items() if c is not None},
            {pid: w for pid, w in wait.items() if w is not None},
        )


@dataclass
class CpuSnapshot:
    t: float
    machine_busy: float
    roles: dict[int, str]
    cpu: dict[int, float]
    wait: dict[int, float]  # the main thread's time runnable but not running


def cpu_figures(
    before: CpuSnapshot, loaded: CpuSnapshot, after: CpuSnapshot, accepted: int
) -> dict[str, Any]:
    """CPU per process from the first send (``before``) until the drain ended (``after``):
    seconds and ms per accepted guess; and its share of one core while the load ran (until
    ``loaded``), which tells who was saturated. By role too (every worker summed), and the
    machine's CPU that none of ours used, during the load."""
    span = max(1e-9, loaded.t - before.t)
    per = max(1, accepted)
    procs: list[dict[str, Any]] = []
    # A process that started in the window counts from zero; one that ended in it is lost
    # (its role is named in "ended").
    roles = {**after.roles, **before.roles}
    for pid, role in sorted(roles.items(), key=lambda kv: (kv[1], kv[0])):
        if pid in after.cpu and (pid in before.cpu or pid not in before.roles):
            start = before.cpu.get(pid, 0.0)
            used = max(0.0, after.cpu[pid] - start)
            busy_s = max(0.0, loaded.cpu.get(pid, start) - start)
            waited = (
                loaded.wait[pid] - before.wait.get(pid, 0.0)
                if pid in loaded.wait and pid in after.wait
                else None
            )
            procs.append(
                {
                    "role": role,
                    "pid": pid,
                    "cpu_s": round(used, 4),
                    "ms_per_guess": round(used * 1000 / per, 4),
                    "load_cpu_s": round(busy_s, 4),
                    "core_share": round(busy_s / span, 4),
                    # its main thread's share of the load spent waiting for a CPU
                    "runqueue_wait_share": None if waited is None else round(waited / span, 4),
                }
            )
    by_role: dict[str, list[float]] = {}
    for p in procs:
        acc = by_role.setdefault(p["role"], [0.0, 0.0])
        acc[0] += p["cpu_s"]
        acc[1] += p["load_cpu_s"]
    ours = sum(a[0] for a in by_role.values())
    ours_loaded = sum(a[1] for a in by_role.values())
    busy = max(0.0, loaded.machine_busy - before.machine_busy)
    started = sorted(r for pid, r in after.roles.items() if pid not in before.roles)
    ended = sorted(r for pid, r in before.roles.items() if pid not in after.cpu)
    return {
        "load_s": round(span, 3),
        "window_s": round(after.t - before.t, 3),
        "processes": procs,
        "workers": [p for p in procs if p["role"] == "worker"],
        "roles": {
            r: {
                "cpu_s": round(a[0], 4),
                "ms_per_guess": round(a[0] * 1000 / per, 4),
                "core_share": round(a[1] / span, 4),
            }
            for r, a in sorted(by_role.items())
        },
        "ours_ms_per_guess": round(ours * 1000 / per, 4),
        "client_runqueue_wait_share": next(
            (p["runqueue_wait_share"] for p in procs if p["pid"] == os.getpid()), None
        ),
        "machine_busy_cores": round(busy / span, 3),
        "others_cores": round(max(0.0, busy - ours_loaded) / span, 3),
        # processes that came (counted from zero) or went (their CPU lost) in the window
        "started": started,
        "ended": ended,
    }


# ---------------------------------------------------------------------------------------------
# Figures


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def window_figures(w: Window, cpu: dict[str, Any], client: GameClient) -> dict[str, Any]:
    guesses = w.guesses
    accepted = [g for g in guesses if g.status == 202]
    scored = [g for g in accepted if g.scored is not None]
    end = w.t0 + w.duration
    a2s = sorted(max(0.0, g.scored - g.answered) for g in scored)  # type: ignore[operator]
    s2s = sorted(g.scored - g.sent for g in scored)  # type: ignore[operator]
    s2a = sorted(g.answered - g.sent for g in guesses if g.status)  # type: ignore[operator]
    lag = sorted(g.sent - g.scheduled for g in guesses)
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for g in guesses:
        if g.status == 429:
            refused[g.error or "?"] += 1
        elif g.status != 202:
            errors[f"{g.status} {g.error}" if g.status else str(g.error)] += 1
    offered = len(guesses) / w.duration
    scored_in_window = sum(1 for g in scored if (g.scored or 0.0) <= end)
    lag_p99 = _ms(pct(lag, 99))
    late_scores = sum(1 for jid in client.early)
    return {
        "rate": w.rate,
        "duration_s": w.duration,
        "offered_per_s": round(offered, 1),
        "sent": len(guesses),
        "sent_per_s": round(len(guesses) / max(w.duration, w.load_end - w.t0), 1),
        "send_lag_p50_ms": _ms(pct(lag, 50)),
        "send_lag_p99_ms": lag_p99,
        "send_lag_max_ms": _ms(lag[-1] if lag else None),
        "client_kept_schedule": lag_p99 is not None and lag_p99 <= LAG_OK_MS,
        "pipelined": w.pipelined,
        "accepted": len(accepted),
        "accepted_per_s": round(
            sum(1 for g in accepted if (g.answered or 0.0) <= end) / w.duration, 1
        ),
        "scored_per_s": round(scored_in_window / w.duration, 1),
        "scored_ok": scored_in_window / w.duration >= SCORED_OK * offered,
        "scored": len(scored),
        "unscored": len(accepted) - len(scored),
        "duplicate_scores": sum(g.scores - 1 for g in scored if g.scores > 1),
        "wrong_socket": sum(1 for g in scored if g.scored_on != g.player),
        "unknown_scores": late_scores,
        "score_before_202": w.score_before_202,
        "unanswered": sum(1 for g in guesses if g.answered is None),
        "refused": dict(refused),
        "errors": dict(errors),
        "accept_to_score_ms": {
            "p50": _ms(pct(a2s, 50)),
            "p90": _ms(pct(a2s, 90)),
            "p99": _ms(pct(a2s, 99)),
            "max": _ms(a2s[-1] if a2s else None),
        },
        "send_to_score_p99_ms": _ms(pct(s2s, 99)),
        "send_to_202_ms": {
            "p50": _ms(pct(s2a, 50)),
            "p99": _ms(pct(s2a, 99)),
            "max": _ms(s2a[-1] if s2a else None),
        },
        "backlog_at_load_end": w.backlog,
        "drained": w.drained,
        "drain_s": round(w.drain_end - w.load_end, 2),
        "ws_messages_per_s": {
            k: round(v / max(1e-9, w.drain_end - w.t0), 1) for k, v in sorted(w.ws_messages.items())
        },
        "ws_kib_per_s": {
            k: round(v / 1024 / max(1e-9, w.drain_end - w.t0), 1)
            for k, v in sorted(w.ws_bytes.items())
        },
        "ws_closes": dict(w.ws_closes),
        "round_rotations": client.rotations,
        "cpu": cpu,
    }


# ---------------------------------------------------------------------------------------------
# Running a configuration


def up_args(a: argparse.Namespace, web_processes: int | None = None) -> list[str]:
    args = ["--workers", str(a.workers), "--round-seconds", str(a.round_seconds)]
    if web_processes is not None:
        args += ["--web-processes", str(web_processes)]
    for extra in a.up_arg:
        args += shlex.split(extra)
    return args


class Crowd:
    """The watchers of one ``up`` (``opts.watchers`` sockets that only read) and the web
    processes' resident set before and after they connected."""

    def __init__(self, fleet: Fleet, rss_before: tuple[int, int]) -> None:
        self.fleet = fleet
        self.rss_before_kb, self.web_processes = rss_before
        self.rss_idle_kb = 0
        self.idle_sockets = 0
        self.setup: dict[str, Any] = {}

    @classmethod
    async def start(
        cls, up: Up, client: GameClient, opts: Options, progress: Progress | None
    ) -> Crowd:
        procs = Processes(up.proc.pid if up.proc else 0)
        crowd = cls(
            Fleet(
                client.host,
                client.port,
                opts.watchers,
                watcher_processes(opts),
                f"w{os.getpid() % 1000}-{int(time.time()) % 100000}",
                opts.watcher_concurrency,
            ),
            web_rss_kb(procs.roles()),
        )
        tasks: list[Any] = []
        if progress is not None:
            tasks = [
                progress.add_task("players", total=opts.watchers, info="watchers signing up"),
                progress.add_task("sockets", total=opts.watchers, info="watchers connecting"),
            ]

        def shown(created: int, connected: int, failed: int) -> None:
            if progress is not None:
                progress.update(tasks[0], completed=created)
                progress.update(tasks[1], completed=connected, info=f"failed {failed:,}")
                progress.refresh()

        began = time.monotonic()
        await crowd.fleet.start(shown)
        if progress is not None:
            ready = crowd.fleet.ready
            shown(sum(int(r["created"]) for r in ready), crowd.fleet.connected, 0)
        failed: Counter[str] = Counter()
        for r in crowd.fleet.ready:
            failed.update(r["failed"])
        await asyncio.sleep(1.0)  # the greetings' buffers are sent and freed
        crowd.rss_idle_kb, _ = web_rss_kb(procs.roles())
        crowd.idle_sockets = crowd.fleet.connected
        crowd.setup = {
            "watchers": opts.watchers,
            "processes": len(crowd.fleet.procs),
            "connected": crowd.fleet.connected,
            "failed": dict(failed),
            "setup_s": round(time.monotonic() - began, 1),
            "create_s": max(float(r["create_s"]) for r in crowd.fleet.ready),
            "connect_s": max(float(r["connect_s"]) for r in crowd.fleet.ready),
            "loop": crowd.fleet.ready[0]["loop"],
        }
        if progress is not None:
            progress.console.print(
                f"{crowd.fleet.connected:,} of {opts.watchers:,} watchers connected in "
                f"{len(crowd.fleet.procs)} process(es) in {crowd.setup['setup_s']} s "
                f"(sign-up {crowd.setup['create_s']} s, sockets {crowd.setup['connect_s']} s)"
                + (f"; failed: {dict(failed)}" if failed else "")
            )
        return crowd

    def figures(self, marks: list[list[dict[str, Any]]], rss_loaded_kb: int) -> dict[str, Any]:
        out = watcher_figures(marks)
        per = max(1, self.idle_sockets)
        loaded = max(1, out["open_at_load_end"])
        out["setup"] = self.setup
        out["web_rss"] = {
            "web_processes": self.web_processes,
            "before_kb": self.rss_before_kb,
            "idle_kb": self.rss_idle_kb,
            "load_end_kb": rss_loaded_kb,
            "idle_sockets": self.idle_sockets,
            # (web RSS with the watchers' sockets open - before they connected) / sockets
            "idle_kb_per_socket": round((self.rss_idle_kb - self.rss_before_kb) / per, 2),
            "load_end_kb_per_socket": round((rss_loaded_kb - self.rss_before_kb) / loaded, 2),
        }
        return out


async def measure(
    opts: Options,
    start: Callable[[], Up],
    stop: Callable[[Up], None],
    extra_roots: Callable[[], Mapping[str, int | list[int]]] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Every rate of ``opts`` on ``up``s from ``start``: a fresh one at first, after a
    rate that did not drain, and for every rate with ``fresh_each_rate``. With
    ``opts.watchers`` a crowd of read-only sockets joins each ``up`` before its first
    window. The core of the benchmark, also run by tests/load/test_bench_game.py."""
    rows: list[dict[str, Any]] = []
    up: Up | None = None
    client: GameClient | None = None
    crowd: Crowd | None = None
    up_rows: list[dict[str, Any]] = []  # the rows measured on the current up

    async def dismiss_crowd() -> None:
        nonlocal crowd
        if crowd is None:
            return
        fleet, crowd = crowd.fleet, None
        closed = await fleet.close()
        if up_rows and "watchers" in up_rows[-1]:
            up_rows[-1]["watchers"]["end_close"] = closed
        if progress is not None:
            progress.console.print(
                f"watchers closed: {closed['clean']:,} of {closed['closing']:,} cleanly "
                f"(1000 both ways), {closed['aborted']:,} aborted"
            )

    try:
        for i, rate in enumerate(opts.rates):
            if up is None or (opts.fresh_each_rate and i) or not rows[-1]["drained"]:
                await dismiss_crowd()
                if client is not None:
                    await client.close()
                if up is not None:
                    stop(up)
                up_rows = []
                began = time.monotonic()
                up = start()
                ready = time.monotonic()
                client = await GameClient(up.base, opts.players, opts.seed, up.admin_token).start()
                if progress is not None:
                    progress.console.print(
                        f"a fresh up was ready in {ready - began:.1f} s; {opts.players} players "
                        f"and their sockets in {time.monotonic() - ready:.1f} s"
                    )
                if opts.watchers > 0:
                    crowd = await Crowd.start(up, client, opts, progress)
                if opts.warmup > 0:
                    await client.offer(min(50.0, rate), opts.warmup, opts, opts.drain)
            assert client is not None and up is not None
            roots: dict[str, int | list[int]] = dict(extra_roots() if extra_roots else {})
            if crowd is not None:
                roots["watchers"] = crowd.fleet.pids
            probe = Processes(up.proc.pid if up.proc else 0, roots)
            snap: list[CpuSnapshot] = []
            rss: list[int] = []
            task = None
            if progress is not None:
                task = progress.add_task(f"{rate:g}/s", total=None, info="")

            def tick(w: Window, sent: int, task: Any = task) -> None:
                assert progress is not None
                progress.update(
                    task,
                    completed=sent,
                    total=w.planned,
                    info=f"202 {w.accepted:,}  scored {w.scored:,}  pipelined {w.pipelined:,}",
                )
                progress.refresh()  # from the loop: a refresh thread would take the GIL mid-send

            def snapshot(
                probe: Processes = probe,
                snap: list[CpuSnapshot] = snap,
                rss: list[int] = rss,
                crowd: Crowd | None = crowd,
            ) -> None:
                if crowd is not None:
                    crowd.fleet.mark()  # one line to each watcher process: it stamps itself
                snap.append(probe.snapshot())
                rss.append(web_rss_kb(snap[-1].roles)[0])

            w = await client.offer(
                rate,
                opts.duration,
                opts,
                opts.drain,
                on_tick=tick if progress is not None else None,
                probe=snapshot,
            )
            if progress is not None:
                tick(w, len(w.guesses))
            before, loaded, after = snap
            row = window_figures(w, cpu_figures(before, loaded, after, w.accepted), client)
            if crowd is not None:
                row["watchers"] = crowd.figures(await crowd.fleet.report(), rss[1])
            rows.append(row)
            up_rows.append(row)
    finally:
        try:
            await dismiss_crowd()
        finally:
            if client is not None:
                await client.close()
            if up is not None:
                stop(up)
    return rows


# ---------------------------------------------------------------------------------------------
# Output


def _f(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _codes(c: dict[str, int]) -> str:
    return " ".join(f"{k} {v:,}" for k, v in sorted(c.items())) or "0"


def print_tables(rows: list[dict[str, Any]], title: str) -> None:
    t = Table(title=f"{title}: throughput and latency")
    for col in (
        "offered/s",
        "send lag p99 ms",
        "accepted/s",
        "scored/s",
        "≥ 95 %",
        "429s",
        "other errors",
        "backlog at load end",
        "accept→score p50 ms",
        "p99 ms",
        "max ms",
        "send→202 p99 ms",
        "drain s",
        "every score once",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        lat = r["accept_to_score_ms"]
        ok = r["unscored"] == r["duplicate_scores"] == r["wrong_socket"] == 0
        backlog = r["backlog_at_load_end"]
        t.add_row(
            _f(r["offered_per_s"]) + ("" if r["client_kept_schedule"] else " [red](late)"),
            _f(r["send_lag_p99_ms"], 1),
            _f(r["accepted_per_s"]),
            _f(r["scored_per_s"]),
            "yes" if r["scored_ok"] else "[red]no",
            _codes(r["refused"]),
            _codes(r["errors"]),
            "-" if backlog is None else f"{backlog['pending'] + backlog['active']:,}",
            _f(lat["p50"], 1),
            _f(lat["p99"], 1),
            _f(lat["max"], 1),
            _f(r["send_to_202_ms"]["p99"], 1),
            _f(r["drain_s"], 1),
            "yes"
            if ok
            else f"[red]{r['unscored']:,} not scored by the drain's end, "
            f"{r['duplicate_scores']} doubled, {r['wrong_socket']} on a wrong socket",
        )
    console.print(t)
    roles = sorted(
        {role for r in rows for role in r["cpu"]["roles"]}
        - {"web", "worker", "valkey", "up", "client"}
    )
    n_workers = max((len(r["cpu"]["workers"]) for r in rows), default=0)
    c = Table(
        title=f"{title}: CPU ms per accepted guess, first send to drained (share of "
        "one core during the load)"
    )
    for col in (
        "offered/s",
        "web",
        *(f"worker {i + 1}" for i in range(n_workers)),
        "Σ workers",
        "valkey",
        "up",
        *roles,
        "client",
        "all ours",
        "other load (cores)",
    ):
        c.add_column(col, justify="right")
    for r in rows:
        cpu = r["cpu"]

        def cell(d: dict[str, Any] | None) -> str:
            if d is None:
                return "-"
            return f"{d['ms_per_guess']:.3f} ({d['core_share'] * 100:.0f} %)"

        workers = [cell(w) for w in cpu["workers"]] + ["-"] * (n_workers - len(cpu["workers"]))
        c.add_row(
            _f(r["offered_per_s"]) + ("" if r["drained"] else " [red](not drained)"),
            cell(cpu["roles"].get("web")),
            *workers,
            cell(cpu["roles"].get("worker")),
            cell(cpu["roles"].get("valkey")),
            cell(cpu["roles"].get("up")),
            *(cell(cpu["roles"].get(x)) for x in roles),
            cell(cpu["roles"].get("client")),
            f"{cpu['ours_ms_per_guess']:.3f}",
            f"{cpu['others_cores']:.2f}",
        )
    console.print(c)
    for r in rows:
        waits: dict[str, list[float]] = {}
        for p in r["cpu"]["processes"]:
            if p["runqueue_wait_share"] is not None:
                waits.setdefault(p["role"], []).append(p["runqueue_wait_share"] * 100)
        if waits:
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: share of the load each main thread "
                "waited for a CPU: "
                + ", ".join(
                    f"{role} {'/'.join(f'{w:.0f}' for w in ws)} %"
                    if len(ws) <= 4
                    else f"{role} ≤ {max(ws):.0f} %"
                    for role, ws in waits.items()
                )
            )
    for r in rows:
        notes = []
        if not r["client_kept_schedule"]:
            client = r["cpu"]["roles"].get("client", {}).get("core_share", 0) * 100
            waited = r["cpu"]["client_runqueue_wait_share"]
            notes.append(
                f"the client sent late (send lag p99 {r['send_lag_p99_ms']} ms, over "
                f"{LAG_OK_MS:g}; {r['sent_per_s']:,}/s sent of {r['offered_per_s']:,}/s "
                f"scheduled) using {client:.0f} % of a core"
                + (
                    ""
                    if waited is None
                    else f" and waiting {waited * 100:.1f} % of the load for one"
                )
                + f", beside {r['cpu']['others_cores']:.2f} cores of other load: the "
                "arrivals were burstier than the schedule"
            )
        if r["pipelined"]:
            notes.append(
                f"{r['pipelined']:,} sends found no idle connection and were pipelined "
                "behind unanswered requests"
            )
        if r["cpu"]["started"] or r["cpu"]["ended"]:
            notes.append(
                f"processes started in the window (counted from zero): "
                f"{r['cpu']['started']}; ended (their CPU not counted): "
                f"{r['cpu']['ended']}"
            )
        traffic = ", ".join(
            f"{k} {r['ws_messages_per_s'][k]:,.0f} msgs {r['ws_kib_per_s'][k]:,.0f} KiB"
            for k in r["ws_kib_per_s"]
        )
        notes.append(f"websocket traffic to the client, per second: {traffic}")
        if r["ws_closes"]:
            notes.append(f"websockets closed by the server: {r['ws_closes']}")
        if not r["drained"]:
            notes.append("the backlog did not drain in time: the next rate ran on a fresh up")
        for note in notes:
            console.print(f"  {r['offered_per_s']:,.0f}/s: {note}")
    if any("watchers" in r for r in rows):
        print_crowd(rows, title)


CROWD_HEAD = (
    "offered/s",
    "watchers open",
    "B/s per watcher (max)",
    "frames/s per watcher (max)",
    "frames/s all watchers",
    "progress/s per watcher",
    "watchers closed",
    "watcher CPU ms/s (core)",
    "web RSS MB before → crowd",
    "web KB/socket idle",
    "at load end",
    "accept→score p50 / p99 ms",
    "web ms/guess (core)",
)


def crowd_cells(r: dict[str, Any]) -> tuple[str, ...]:
    """One row's crowd figures as text (the console's table and the HTML's)."""
    c = r["watchers"]
    rss = c["web_rss"]
    web = r["cpu"]["roles"].get("web")
    lat = r["accept_to_score_ms"]
    return (
        _f(r["offered_per_s"]),
        f"{c['open_at_load_end']:,} of {c['setup']['watchers']:,}",
        f"{_f(c['bytes_per_s']['mean'])} ({_f(c['bytes_per_s']['max'])})",
        f"{_f(c['frames_per_s']['mean'], 2)} ({_f(c['frames_per_s']['max'], 2)})",
        _f(c["frames_per_s_all"]),
        _f(c["progress_per_s"]["mean"], 2),
        _codes(c["closed"]),
        f"{_f(c['cpu_ms_per_s'], 1)} ({c['core_share'] * 100:.0f} %)",
        f"{rss['before_kb'] / 1024:,.0f} → {rss['idle_kb'] / 1024:,.0f}",
        _f(rss["idle_kb_per_socket"], 1),
        _f(rss["load_end_kb_per_socket"], 1),
        f"{_f(lat['p50'], 1)} / {_f(lat['p99'], 1)}",
        "-" if web is None else f"{web['ms_per_guess']:.3f} ({web['core_share'] * 100:.0f} %)",
    )


def print_crowd(rows: list[dict[str, Any]], title: str) -> None:
    t = Table(
        title=f"{title}: the crowd (watchers' sockets only read; rates over the load, "
        "closes first send to drained; web RSS per socket = (web RSS with the crowd − "
        "before it connected) ÷ sockets)"
    )
    for col in CROWD_HEAD:
        t.add_column(col, justify="right")
    for r in rows:
        if "watchers" in r:
            t.add_row(*crowd_cells(r))
    console.print(t)
    for r in rows:
        c = r.get("watchers")
        if c is None:
            continue
        setup = c["setup"]
        if c.get("closed_before"):
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: watchers closed by the server before this "
                f"window: {c['closed_before']}"
            )
        if setup["failed"]:
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: watchers that never connected: {setup['failed']}"
            )
        if "end_close" in c:
            e = c["end_close"]
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: at the end, {e['clean']:,} of "
                f"{e['closing']:,} watcher sockets closed cleanly, {e['aborted']:,} aborted"
            )


def side_by_side_rows(
    row: dict[str, Any], crowd: bool | None = None
) -> list[tuple[str, float | None, int]]:
    """(figure, value, digits) of one row, for comparing configurations. ``crowd`` (default:
    the row has one) adds the crowd's figures, None where the row has no crowd, so that a
    configuration with 0 watchers lines up with one that has them."""
    web = row["cpu"]["roles"].get("web") or {}
    offered = row["offered_per_s"]
    out: list[tuple[str, float | None, int]] = [
        ("scored/s", row["scored_per_s"], 0),
        ("scored/s ÷ offered/s", row["scored_per_s"] / offered if offered else None, 2),
        ("accept→score p50 ms", row["accept_to_score_ms"]["p50"], 1),
        ("accept→score p99 ms", row["accept_to_score_ms"]["p99"], 1),
        ("web CPU ms/guess (Σ)", web.get("ms_per_guess"), 3),
        ("web share of a core (Σ)", web.get("core_share"), 2),
    ]
    c = row.get("watchers")
    if crowd is None:
        crowd = c is not None
    if crowd:
        figures: list[tuple[str, Callable[[dict[str, Any]], float], int]] = [
            ("watchers open at load end", lambda c: float(c["open_at_load_end"]), 0),
            ("B/s per watcher", lambda c: c["bytes_per_s"]["mean"], 0),
            ("frames/s all watchers", lambda c: c["frames_per_s_all"], 0),
            ("progress/s per watcher", lambda c: c["progress_per_s"]["mean"], 2),
            ("watchers closed", lambda c: float(sum(c["closed"].values())), 0),
            ("watcher CPU ms/s", lambda c: c["cpu_ms_per_s"], 1),
            ("web KB/socket idle", lambda c: c["web_rss"]["idle_kb_per_socket"], 1),
            ("web KB/socket at load end", lambda c: c["web_rss"]["load_end_kb_per_socket"], 1),
        ]
        out += [(name, None if c is None else get(c), digits) for name, get, digits in figures]
    return out


def config_name(c: dict[str, Any]) -> str:
    """What a configuration's column is called: "1 web, 9,800 watchers"."""
    return c.get("name") or f"{c['web_processes']} web, {int(c.get('watchers') or 0):,} watchers"


def side_by_side(configs: list[dict[str, Any]]) -> tuple[list[str], list[list[list[str]]]]:
    """The side-by-side table as text (the console's and the HTML's): its heads, and per
    rate of the first configuration the rows (offered/s, figure, each configuration's value,
    each one's ratio to the first's; "-" where there is none)."""
    names = [config_name(c) for c in configs]
    heads = ["offered/s", "figure", *names, *(f"{n} ÷ {names[0]}" for n in names[1:])]
    crowd = any("watchers" in r for c in configs for r in c["rows"])
    sections = []
    for i, first in enumerate(configs[0]["rows"]):
        each = [
            side_by_side_rows(c["rows"][i], crowd) if i < len(c["rows"]) else [] for c in configs
        ]
        lines = []
        for j, (name, _, digits) in enumerate(each[0]):
            got = [f[j][1] if j < len(f) else None for f in each]
            base = got[0]
            ratios = ["-" if v is None or not base else f"{v / base:.2f}×" for v in got[1:]]
            lines.append(
                [
                    _f(first["offered_per_s"]) if j == 0 else "",
                    name,
                    *(_f(v, digits) for v in got),
                    *ratios,
                ]
            )
        sections.append(lines)
    return heads, sections


def print_side_by_side(configs: list[dict[str, Any]]) -> None:
    """Every configuration's figures per rate, with each one's ratio to the first."""
    heads, sections = side_by_side(configs)
    t = Table(title=f"configurations side by side (ratio = each ÷ {heads[2]})")
    for k, h in enumerate(heads):
        t.add_column(h, justify="left" if k == 1 else "right")
    for lines in sections:
        for j, line in enumerate(lines):
            t.add_row(*line, end_section=j == len(lines) - 1)
    console.print(t)


def write_html(path: Path, result: dict[str, Any]) -> None:
    """A self-contained page: the plots (embedded PNGs) and every row's main figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    x = [r["offered_per_s"] for r in rows]
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, style in (("p50", "o-"), ("p99", "s-"), ("max", "^--")):
        ax.plot(x, [r["accept_to_score_ms"][key] for r in rows], style, label=f"accept→score {key}")
    ax.plot(x, [r["send_to_202_ms"]["p99"] for r in rows], "x:", label="send→202 p99")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="offered guesses/s",
        ylabel="ms",
        title="latency vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    roles = sorted({role for r in rows for role in r["cpu"]["roles"]})
    for role in roles:
        ax.plot(
            x,
            [r["cpu"]["roles"].get(role, {}).get("ms_per_guess") for r in rows],
            "o-",
            label=role + (" (all)" if role == "worker" else ""),
        )
    ax.set(
        xscale="log",
        xlabel="offered guesses/s",
        ylabel="CPU ms per accepted guess",
        title="CPU per guess per process vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, x, "k:", label="offered")
    ax.plot(x, [r["accepted_per_s"] for r in rows], "o-", label="accepted/s")
    ax.plot(x, [r["scored_per_s"] for r in rows], "s-", label="scored/s")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="offered guesses/s",
        ylabel="guesses/s",
        title="throughput vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    head = (
        "offered/s",
        "accepted/s",
        "scored/s",
        "429s",
        "errors",
        "p50 ms",
        "p99 ms",
        "max ms",
        "send→202 p99",
        "send lag p99",
        "web ms",
        "workers ms",
        "valkey ms",
        "client ms",
        "other load (cores)",
        "drained",
    )
    cells = []
    for r in rows:
        roles_ = r["cpu"]["roles"]
        vals = (
            r["offered_per_s"],
            r["accepted_per_s"],
            r["scored_per_s"],
            _codes(r["refused"]),
            _codes(r["errors"]),
            r["accept_to_score_ms"]["p50"],
            r["accept_to_score_ms"]["p99"],
            r["accept_to_score_ms"]["max"],
            r["send_to_202_ms"]["p99"],
            r["send_lag_p99_ms"],
            *(roles_.get(k, {}).get("ms_per_guess") for k in ("web", "worker", "valkey", "client")),
            r["cpu"]["others_cores"],
            "yes" if r["drained"] else "no",
        )
        cells.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in vals) + "</tr>")
    crowd = []
    configs = result.get("configs") or [{"title": result["title"], "rows": rows}]
    for c in configs:
        crowd_rows = [r for r in c["rows"] if "watchers" in r]
        if not crowd_rows:
            continue
        crowd.append(
            f"<h2>The crowd: {html.escape(c['title'])}</h2><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in CROWD_HEAD)
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in crowd_cells(r)) + "</tr>"
                for r in crowd_rows
            )
            + "</table>"
        )
    if crowd:
        crowd.append(
            "<p>Watchers are extra players whose sockets only read (their own process: "
            "bench/watchers.py); per watcher, bytes and frames received a second over the "
            "load, mean (max over watchers); closes from the first send until drained, by "
            "close code; web RSS per socket = (the web processes' VmRSS with the crowd "
            "connected − before it connected) ÷ its sockets, idle (before the first window) "
            "and at the load's end.</p>"
        )
    if len(configs) > 1:
        heads, sections = side_by_side(configs)
        crowd.append(
            f"<h2>Configurations side by side (ratio = each ÷ {html.escape(heads[2])})</h2>"
            "<table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in heads)
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in line) + "</tr>"
                for lines in sections
                for line in lines
            )
            + "</table>"
        )
    m = result["machine"]
    page = f"""<!doctype html><meta charset="utf-8"><title>codemojex game path</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em;text-align:right}}
img{{max-width:100%}}</style>
<h1>The game path: open-loop guesses</h1>
<p>{html.escape(result["title"])}, each player with a socket;
{result["options"]["duration"]} s per rate, {html.escape(result["options"]["schedule"])} arrivals;
source {html.escape(str(result.get("source", {}).get("head", "?")))}
({len(result.get("source", {}).get("changed", []))} files changed beside it).
Machine: {html.escape(str(m["cpu"]))}, {m["cores"]} cores, load average {m["loadavg_1m"]:.2f}
at start (the client shares these cores).</p>
<table><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in head)}</tr>{"".join(cells)}</table>
{"".join(f'<p><img src="{src}"></p>' for src in figs)}
{"".join(crowd)}
<p>Latencies on the client's one clock: accept→score is the 202's arrival to the score's
arrival on the owner's socket. CPU is per accepted guess, from the first send until the drain
ended (a row that did not drain undercounts the workers); "other load" is the machine's CPU
used by processes that are not ours during the load.</p>
"""
    path.write_text(page)


# ---------------------------------------------------------------------------------------------
# The command


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_game",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--rates",
        default="100,300,1000,2000",
        help="offered guesses/s, comma-separated (100,300,1000,2000)",
    )
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per rate (10)")
    p.add_argument(
        "--drain",
        type=float,
        default=30.0,
        help="seconds to wait for the last scores after each rate (30)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="seconds at a low rate before the first rate, not recorded (2)",
    )
    p.add_argument("--players", type=int, default=200, help="players, one socket each (200)")
    p.add_argument(
        "--connections",
        type=int,
        default=64,
        help="keep-alive connections at most (64; fewer at low rates)",
    )
    p.add_argument("--schedule", choices=["poisson", "uniform"], default="poisson")
    p.add_argument(
        "--pick",
        choices=["round-robin", "random"],
        default="round-robin",
        help="which player sends each guess (round-robin)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=2, help="ScoreWorker processes (2)")
    p.add_argument(
        "--round-seconds",
        type=int,
        default=600,
        help="round length, long enough that a sweep seldom crosses a close (600)",
    )
    p.add_argument("--database-url", help="run against this database (postgresql://…)")
    p.add_argument(
        "--postgres",
        action="store_true",
        help="start a throwaway PostgreSQL cluster and run against it",
    )
    p.add_argument(
        "--up-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `codemojex up` flags, e.g. --up-arg=--concurrency=8 (repeatable)",
    )
    p.add_argument(
        "--up-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a CODEMOJEX_* variable for `up`, e.g. --up-env CODEMOJEX_PLAYER_RATE=0 for more "
        "players than one address may sign up (repeatable)",
    )
    p.add_argument(
        "--fresh-each-rate",
        action="store_true",
        help="a fresh up for every rate (by default only after one that did not drain)",
    )
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure the server at git revision REV (a temporary worktree), "
        "each rate right before the current code, and print the ratios",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="also measure bench_floor (the barest code on the same parts) at the same rates, "
        "players and workers, first, and print each role's figure as a ratio to it",
    )
    p.add_argument(
        "--watchers",
        default="0",
        metavar="N[,M…]",
        help="N extra players whose sockets only read (bench/watchers.py, their own "
        "process), all connected before the first window (0); several (0,9800) measure "
        "each crowd in turn, each on its own up, crossed with --web-processes (for each "
        "web-processes value, each watchers value) and printed side by side",
    )
    p.add_argument(
        "--watcher-processes",
        type=int,
        default=0,
        metavar="K",
        help=f"processes the watchers are spread over (0: one per {WATCHERS_PER_PROCESS:,}, "
        "at most 2)",
    )
    p.add_argument(
        "--watcher-concurrency",
        type=int,
        default=64,
        help="watcher sockets being opened at once, in all (64)",
    )
    p.add_argument(
        "--web-processes",
        metavar="N[,M…]",
        help="`codemojex up --web-processes N`; several (1,2) measure each configuration "
        "in turn, each on its own up, and print them side by side (default: up's own, 1)",
    )
    p.add_argument("--json", metavar="OUT", help="write every figure as JSON to OUT")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML report to OUT")
    p.add_argument(
        "--via",
        choices=("http", "socket"),
        default="http",
        help="how guesses are sent: POST /api/guesses on keep-alive connections, or a guess "
        "frame on the player's own websocket (answered by an accepted/error frame)",
    )
    p.add_argument("--quiet", dest="progress", action="store_false", help="no progress bars")
    a = p.parse_args(argv)
    for name in ("watchers", "web_processes"):
        text = getattr(a, name)
        if text is None:
            continue
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        low = 0 if name == "watchers" else 1
        if not values or min(values) < low:
            p.error(f"--{name.replace('_', '-')}: integers ≥ {low}, comma-separated: {text!r}")
    return a


def int_list(text: str | None) -> list[int]:
    """``0,9800`` → [0, 9800] (an option ``parse`` has checked)."""
    return [int(x) for x in (text or "").split(",") if x.strip()]


@contextlib.contextmanager
def database(
    a: argparse.Namespace,
) -> Iterator[tuple[Callable[[], str | None], Callable[[], dict[str, int]]]]:
    """(a URL for the next ``up``: None for SQLite, the roots of its processes to watch)."""
    if not a.postgres:
        yield (lambda: a.database_url), dict
        return
    from harness.pg import PgCluster

    cluster = PgCluster.start()
    try:

        def roots() -> dict[str, int]:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return {
                    "postgres": int((cluster.datadir / "postmaster.pid").read_text().split()[0])
                }
            return {}

        yield cluster.create_database, roots
    finally:
        cluster.stop()


async def run(
    a: argparse.Namespace,
    opts: Options,
    tmp: Path,
    title: str,
    server_root: Path | None = None,
    web_processes: int | None = None,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every rate of ``opts`` on ``up``s with ``--web-processes web_processes`` and ``env``
    (default: ``up_env(opts)``)."""
    with database(a) as (next_url, roots):

        def start() -> Up:
            args = up_args(a, web_processes)
            url = next_url()
            if url:
                args += ["--database-url", url]
            n = len(list(tmp.glob("data-*")))
            return start_up(
                tmp / f"data-{n}", *args, env=up_env(opts) if env is None else env, root=server_root
            )

        def stop(up: Up) -> None:
            try:
                up.stop()
            except AssertionError as e:
                console.print(f"[yellow]up did not stop cleanly: {str(e).splitlines()[0]}")
            finally:
                up.kill_everything()

        progress = None
        if opts.progress:
            progress = Progress(
                TextColumn("{task.description:>8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=console,
                auto_refresh=False,
            )
        with progress or contextlib.nullcontext():
            return await measure(opts, start, stop, roots, progress)


@dataclass
class Tree:
    path: Path
    rev: str


@contextlib.contextmanager
def baseline_tree(rev: str, where: Path) -> Iterator[Tree]:
    """A detached ``git worktree`` of ``rev``, removed afterwards. Its ``codemojex`` runs
    with this environment's packages (uvicorn picks up httptools and uvloop wherever they
    are installed, so an older server gets them too)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(where), rev],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        short = subprocess.run(
            ["git", "rev-parse", "--short", rev],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield Tree(where, short)
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(where)],
            cwd=root,
            check=False,
            capture_output=True,
        )


def print_ratios(base: list[dict[str, Any]], now: list[dict[str, Any]], rev: str) -> None:
    """Per rate: the current figure, the baseline's, and current ÷ baseline."""
    t = Table(title=f"now vs {rev}, same run (ratio = now ÷ baseline)")
    for col in (
        "offered/s",
        "scored/s",
        "p50 ms",
        "p99 ms",
        "web ms/guess",
        "Σ workers ms/guess",
        "valkey ms/guess",
    ):
        t.add_column(col, justify="right")

    def cell(x: float | None, y: float | None, digits: int = 1) -> str:
        if x is None or y is None:
            return "-"
        ratio = f" ({x / y:.2f}×)" if y else ""
        return f"{_f(x, digits)} vs {_f(y, digits)}{ratio}"

    def ms(r: dict[str, Any], role: str) -> float | None:
        got = r["cpu"]["roles"].get(role)
        return None if got is None else float(got["ms_per_guess"])

    for b, n in zip(base, now, strict=False):
        t.add_row(
            _f(n["offered_per_s"]),
            cell(n["scored_per_s"], b["scored_per_s"], 0),
            cell(n["accept_to_score_ms"]["p50"], b["accept_to_score_ms"]["p50"]),
            cell(n["accept_to_score_ms"]["p99"], b["accept_to_score_ms"]["p99"]),
            cell(ms(n, "web"), ms(b, "web"), 3),
            cell(ms(n, "worker"), ms(b, "worker"), 3),
            cell(ms(n, "valkey"), ms(b, "valkey"), 3),
        )
    console.print(t)


def measure_floor(a: argparse.Namespace, opts: Options) -> list[dict[str, Any]]:
    """bench_floor at this run's rates, duration, players and workers (its rows)."""
    from bench import bench_floor

    console.print("[bold]floor[/]: bench_floor at the same rates, players and workers")
    args = ["--rates", ",".join(f"{r:g}" for r in opts.rates), "--duration", f"{opts.duration:g}"]
    args += ["--players", str(opts.players), "--workers", str(a.workers)]
    args += ["--schedule", opts.schedule, *(["--quiet"] if not a.progress else [])]
    result = bench_floor.measure(bench_floor.parse(args))
    rows: list[dict[str, Any]] = result["rows"]
    bench_floor.print_table(rows, "floor: bench_floor, same run")
    return rows


def floor_ratios(floor: dict[str, Any], game: dict[str, Any]) -> dict[str, float | None]:
    """Each role's CPU ms per accepted guess in the game ÷ the floor's, and the server's."""

    def game_ms(role: str) -> float | None:
        got = game["cpu"]["roles"].get(role)
        return None if got is None else float(got["ms_per_guess"])

    out: dict[str, float | None] = {}
    for role in ("web", "worker", "valkey"):
        g, f = game_ms(role), float(floor["cpu"][role]["ms_per_guess"])
        out[role] = None if g is None or not f else g / f
    parts = [game_ms(r) for r in ("web", "worker", "valkey")]
    server = None if None in parts else sum(p for p in parts if p is not None)
    out["server"] = None if server is None else server / float(floor["server_ms_per_guess"])
    return out


def print_floor_ratios(floor: list[dict[str, Any]], rows: list[dict[str, Any]], title: str) -> None:
    """Per rate: each role's CPU per accepted guess, the game's and the floor's, game ÷ floor."""
    t = Table(title=f"{title}: the game vs its floor, same run (ratio = game ÷ floor)")
    for col in ("offered/s", "scored/s game / floor", "web", "Σ workers", "valkey", "server"):
        t.add_column(col, justify="right")
    for f, r in zip(floor, rows, strict=False):  # the same rates, in the same order
        ratio = floor_ratios(f, r)
        cells = []
        for role in ("web", "worker", "valkey"):
            got = r["cpu"]["roles"].get(role)
            g = "-" if got is None else f"{float(got['ms_per_guess']):.3f}"
            x = ratio[role]
            cells.append(f"{g} / {float(f['cpu'][role]['ms_per_guess']):.3f}" + (
                f" ({x:.2f}×)" if x is not None else ""))  # fmt: skip
        server = ratio["server"]
        cells.append("-" if server is None else f"{server:.2f}×")
        t.add_row(
            _f(r["offered_per_s"]),
            f"{_f(r['scored_per_s'], 0)} / {float(f['scored_per_s']):.0f}",
            *cells,
        )
    console.print(t)
    console.print("CPU in ms per accepted guess (game / floor); server = web + workers + valkey.")


def source_state() -> dict[str, Any]:
    """The commit measured, and the files changed beside it (others may be mid-edit)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            ).stdout
        return ""

    return {
        "head": git("rev-parse", "--short", "HEAD").strip(),
        "changed": [
            line[3:]
            for line in git("status", "--porcelain").splitlines()
            if line[3:].endswith(".py") or line[3:].endswith(".lua")
        ],
    }


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    signals_raise_keyboardinterrupt()
    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    opts = Options(
        rates=[float(r) for r in a.rates.split(",") if r.strip()],
        duration=a.duration,
        drain=a.drain,
        warmup=a.warmup,
        players=a.players,
        connections=a.connections,
        schedule=a.schedule,
        pick=a.pick,
        seed=a.seed,
        fresh_each_rate=a.fresh_each_rate,
        progress=a.progress,
        watcher_processes=a.watcher_processes,
        watcher_concurrency=a.watcher_concurrency,
        via=a.via,
    )
    webs: list[int | None] = list(int_list(a.web_processes)) or [None]
    crowds = int_list(a.watchers) or [0]
    # every (web processes, watchers) pair in turn: web processes outer, watchers inner
    plan = [(web, replace(opts, watchers=n)) for web in webs for n in crowds]
    # with a crowd anywhere, every configuration gets its settings: only the crowd differs
    env = up_env(opts, crowd=max(crowds) > 0)
    for item in a.up_env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("CODEMOJEX_"):
            raise SystemExit(f"--up-env {item!r}: NAME=VALUE with a CODEMOJEX_ name")
        env[name] = value
    # up and its web processes inherit the limit: a crowd needs a descriptor per socket
    nofile = raise_nofile()
    db = "PostgreSQL (throwaway)" if a.postgres else ("PostgreSQL" if a.database_url else "SQLite")

    def title_of(web: int | None, o: Options) -> str:
        crowd = f" + {o.watchers:,} watchers" if o.watchers else ""
        return f"codemojex up {' '.join(up_args(a, web))} — {db}, {a.players} players{crowd}"

    m = machine()
    src = source_state()
    top = max(opts.rates, default=0) / max(1, opts.players)
    crowd_note = ", then ".join(
        f"{n:,} (in {watcher_processes(replace(opts, watchers=n))} process(es))" if n else "0"
        for n in crowds
    )
    console.print(
        f"[bold]{title_of(*plan[0])}[/]; guesses over {opts.via}; {opts.schedule} arrivals, "
        f"{opts.duration:g} s per "
        f"rate; at most {top:.1f} guesses/s per player; client loop: "
        f"{'uvloop' if uvloop else 'asyncio'}; source {src['head']}"
        + (f" + uncommitted changes to {len(src['changed'])} files" if src["changed"] else "")
        + (f"; watchers {crowd_note}, open files {nofile:,}" if max(crowds) > 0 else "")
        + (f"; web processes {', '.join(map(str, webs))} in turn" if len(webs) > 1 else "")
    )
    started = time.monotonic()
    runner = uvloop.run if uvloop else asyncio.run
    floor_rows = measure_floor(a, opts) if a.floor else None
    configs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cmx-bench-game-") as tmp:
        try:
            for k, (web, o) in enumerate(plan):
                title = title_of(web, o)
                base_rows: list[dict[str, Any]] | None = None
                if len(plan) > 1:
                    console.print(f"[bold]configuration {k + 1} of {len(plan)}[/]: {title}")
                if a.baseline:
                    with baseline_tree(a.baseline, Path(tmp) / f"baseline{k}") as tree:
                        console.print(
                            f"[bold]baseline[/]: the server at {a.baseline} "
                            f"({tree.rev}), same client, same machine"
                        )
                        (Path(tmp) / f"b{k}").mkdir()
                        base_rows = runner(
                            run(a, o, Path(tmp) / f"b{k}", title, tree.path, web, env)
                        )
                (Path(tmp) / f"c{k}").mkdir()
                rows = runner(run(a, o, Path(tmp) / f"c{k}", title, None, web, env))
                configs.append(
                    {
                        "name": f"{web or 1} web, {o.watchers:,} watchers",
                        "web_processes": web or 1,
                        "watchers": o.watchers,
                        "title": title,
                        "up_args": up_args(a, web),
                        "up_env": env,
                        "rows": rows,
                        "baseline": {"rev": a.baseline, "rows": base_rows},
                    }
                )
        except KeyboardInterrupt:
            console.print("[red]interrupted: every `up` was stopped")
            return 130
    for c in configs:
        if c["baseline"]["rows"] is not None:
            print_tables(c["baseline"]["rows"], f"{c['title']} — baseline {a.baseline}")
        print_tables(c["rows"], c["title"])
        if c["baseline"]["rows"] is not None:
            print_ratios(c["baseline"]["rows"], c["rows"], a.baseline)
    if floor_rows is not None:
        for c in configs:
            print_floor_ratios(floor_rows, c["rows"], c["title"])
    if len(configs) > 1:
        print_side_by_side(configs)
    console.print(
        f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB, kernel "
        f"{m['kernel']}, Python {m['python']}; load average {m['loadavg_1m']:.2f} "
        f"at start, {os.getloadavg()[0]:.2f} at the end (the client shares these "
        f"cores); total {time.monotonic() - started:.0f} s"
    )
    first = configs[0]
    result = {
        "title": first["title"],
        "machine": m,
        "loadavg_end": os.getloadavg(),
        # the first configuration's (its watchers); each one's are in configs
        "options": asdict(plan[0][1]),
        "up_args": first["up_args"],
        "database": db,
        "source": src,
        # the first configuration's, as before --web-processes and --watchers took lists
        "rows": first["rows"],
        "baseline": first["baseline"],
        # every configuration, in the order measured (web processes outer, watchers inner;
        # one unless --web-processes or --watchers is a list), each with its name,
        # web_processes, watchers, up_args, up_env, rows and baseline
        "configs": configs,
        # bench_floor's rows at the same rates (--floor), measured first in this run
        "floor": floor_rows,
    }
    if a.json:
        Path(a.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
        console.print(f"figures written to {a.json}")
    if a.html:
        write_html(Path(a.html), result)
        console.print(f"report written to {a.html}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
