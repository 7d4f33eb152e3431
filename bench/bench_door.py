"""The door under mashers: honest players' latency and share accepted, alone and beside
closed-loop mashers, on the server's own core, and what a refusal costs the web; prints
figures, asserts nothing.

    uv run python -m bench.bench_door
        [--rows 0:0,10:same,50:same,200:20:spread,200:20,replay:5,0:0] [--duration 8]
        [--players 100] [--honest-rate 30] [--masher-in-flight 8] [--masher-procs 0]
        [--up-arg=--workers=2] [--server-rev REV] [--nginx] [--no-pin] [--no-costs]
        [--json OUT]

Starts one ``codemojex up`` (defaults: embedded Valkey, SQLite, 2 workers; rounds of an
hour, so none closes mid-row) **pinned to CPU 0** (``up`` is started with that affinity and
forks every child from it; each row checks every server process's ``Cpus_allowed_list``)
while this process and the masher processes it starts run on CPU 1, so a row shows the
server and not its wait for the load's CPU. ``--server-rev REV`` runs the server of another
revision (a temporary ``git worktree``) under the same clients; ``--nginx`` sends every
row through Debian's nginx with compose's config (``harness.nginx``; on CPU 0 too, the web
trusting its ``X-Forwarded-For``), counted as the server's. It creates the honest
players from 127.0.0.1 and opens a socket each, then runs every row of ``--rows`` on the
same server:

* **honest load**, from this process: ``--honest-rate`` guesses a second in all, open loop
  (Poisson send times, each to a random player with nothing in flight), one attempt each;
  per guess the send, the answer and its score on the owner's socket are timestamped. In
  a ``:spread`` row each player's guesses come from one of the mashers' addresses.
* **mashers** (``N:same``: from the honest players' address; ``N:K``: from 127.0.0.2 …
  127.0.0.K+1), from processes of their own (one per 100 mashers, ``--masher-procs``):
  each masher signs up, opens a socket (its scores counted per job) and runs
  ``--masher-in-flight`` closed loops on raw keep-alive HTTP/1.1 connections, sleeping
  ``Retry-After`` on 429 and not on 503, as fast as the answers come; afterwards every
  accepted guess must have been scored once on its socket and be stored completed with a
  score (``lost``, ``doubled``). The honest figures of the row are those sent while the
  mashers' load ran. Rows ``0:0`` are the honest players alone (first and last by
  default), and every ratio is to their median, from the same run.
* **the replay loop** (row ``replay:K``): the issue's one player from an address of its
  own (127.0.0.250) reconnecting K sockets in a loop with ``after=0``, each reading its
  greeting and replay, then closing; placed after the masher rows, whose guesses filled
  the events stream (its length is printed).

Then the **cost of an answer** to the web process (its CPU from ``/proc/<pid>/stat``,
user + system, over a burst of each kind, idle CPU of the same length subtracted): an
accepted guess (players at an honest pace), a ``429`` the bucket mirror answers without
Valkey (a player over its rate that ignores ``Retry-After``), and a ``503 overloaded`` at
the per-address bound (requests from an address whose bound is held by slow requests).

Per row: honest send→score and send→202 p50/p99 (and their ratio to alone; and the p99
leaving out the window's first 3 s, when every masher's connections and first requests
arrive at once), honest guesses accepted (of those sent), honest non-202 answers, the
mashers' answers by status, the CPU of both sides (the server's processes, and this
process with the masher processes) as a share of a core and as CPU ms per guess accepted
in the row, and the mashers' verdict line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import orjson
import redis.asyncio
import redis.exceptions
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from websockets.asyncio.client import ClientConnection, connect

from bench.common import ROOT, machine, proc_cpu_seconds, proc_runqueue_wait_seconds
from codemojex.mash.ledger import percentile as pct
from codemojex.store import SQLITE_FILENAME
from harness.helpers import slow_request, sql_write_locked
from harness.running import Up, cmdline, descendants

if TYPE_CHECKING:
    from harness.nginx import Nginx

ROWS = "0:0,10:same,50:same,200:20:spread,200:20,replay:5,0:0"
REPLAY = -1  # a row's "mashers" for the replay loop (its "addresses": the loop's sockets)
REPLAY_ADDRESS = "127.0.0.250"  # the replay loop's own client address
REPLAY_QUIET_S = 0.5  # a greeting is over once its socket is this quiet (or sent progress)
ROUND_SECONDS = 3600
CPU_SAMPLE_S = 0.1
ONSET_S = 3.0  # the start of a row's window, left out of the steady-state p99
SLOW_S = 0.1  # an honest answer slower than this is listed with its time in the window
SETTLE_S = 2.0  # quiet between rows: the last backlog scores, sockets settle


HONEST_ADDRESS = "127.0.0.1"
# A row: (mashers, addresses) or (mashers, addresses, spread). addresses 0: the mashers send
# from the honest players' address; K: from 127.0.0.2 … 127.0.0.K+1, and with spread the
# honest players' guesses come from those same K addresses (round robin), else from their own.
Row = tuple[int, int] | tuple[int, int, bool]
SERVER_CPU = 0  # bench_door pins the server (`up` and every child) here
CLIENT_CPU = 1  # and itself and its masher processes here


@dataclass
class Options:
    rows: list[Row] = field(default_factory=lambda: parse_rows(ROWS))
    duration: float = 8.0
    players: int = 100
    honest_rate: float = 30.0
    masher_in_flight: int = 8
    up_args: list[str] = field(default_factory=list)
    cost_requests: int = 600
    progress: bool = True
    seed: int = 7
    door_slots: int = 16  # the web's --door-in-flight (the cost of a 503 fills them)
    masher_procs: int = 0  # masher processes per row; 0: one per 100 mashers
    costs: bool = True
    pin: bool = False  # main(): the server on SERVER_CPU, the clients on CLIENT_CPU
    nginx: bool = False  # main(): the rows through nginx (front_port), as deployed
    front_port: int | None = None  # where the clients send, when not the web itself
    server_rev: str | None = None  # main(): the server of this git revision
    json: Path | None = None


def parse_rows(text: str) -> list[Row]:
    """``mashers:addresses[:spread]`` rows (``same`` for the honest players' address);
    ``replay:K`` is the replay loop with K sockets, kept as ``(REPLAY, K)``."""
    rows: list[Row] = []
    for part in text.split(","):
        mashers, _, rest = part.strip().partition(":")
        addresses, _, spread = rest.partition(":")
        if mashers == "replay":
            rows.append((REPLAY, int(addresses or "5")))
            continue
        n = int(mashers)
        k = 0 if addresses == "same" or not n else int(addresses or "1")
        rows.append((n, k, True) if spread == "spread" and k else (n, k))
    return rows


def masher_address(i: int, addresses: int) -> str:
    """Masher ``i``'s client address: the honest players' with ``addresses`` 0."""
    return f"127.0.0.{2 + i % addresses}" if addresses else HONEST_ADDRESS


def row_label(mashers: int, addresses: int, spread: bool) -> str:
    if mashers == REPLAY:
        return f"replay loop ({addresses} sockets, after=0)"
    if not mashers:
        return "none (alone)"
    if not addresses:
        return f"{mashers} (the honest players' address)"
    where = f"{addresses} address{'es' if addresses != 1 else ''}"
    return f"{mashers} ({where}; honest {'spread over them' if spread else 'on another'})"


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


# -- mashers of their own ---------------------------------------------------------------------


@dataclass
class MashTally:
    """What closed-loop mashers were told: answers by status, and the accepted job ids."""

    statuses: Counter[int] = field(default_factory=Counter)
    accepted: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def guess_request(token: str, round_id: str, guess: list[str]) -> bytes:
    """A whole ``POST /api/guesses`` on a keep-alive connection."""
    body = orjson.dumps({"round_id": round_id, "guess": guess})
    return (
        b"POST /api/guesses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request and its answer (status, lower-cased headers, body) on an open connection."""
    writer.write(request)
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection")
    status = int(line.split()[1])
    headers: dict[bytes, bytes] = {}
    while (header := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = header.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
    return status, headers, body


async def mash_loop(
    port: int,
    token: str,
    round_id: str,
    palette: list[str],
    length: int,
    until: float,
    tally: MashTally,
    *,
    source: str = "127.0.0.1",
    rng: random.Random | None = None,
) -> None:
    """A keyboard masher's loop until ``until`` (monotonic): random guesses back to back on
    one keep-alive connection from ``source``, sleeping ``Retry-After`` on a 429 and sending
    again at once on a 503, as a script that ignores the door does. Raw HTTP/1.1 on asyncio
    streams: an HTTP client library costs a load generator more CPU than the server's answer,
    and a masher script is not slowed by its own client."""
    rng = rng or random.Random()
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        while time.monotonic() < until:
            try:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                guess = [rng.choice(palette) for _ in range(length)]
                status, headers, body = await exchange(*conn, guess_request(token, round_id, guess))
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                tally.errors[type(exc).__name__] += 1
                if conn is not None:
                    conn[1].close()
                conn = None
                await asyncio.sleep(0.05)
                continue
            tally.statuses[status] += 1
            if status == 202:
                tally.accepted.append(str(orjson.loads(body)["job_id"]))
            elif status == 429:
                await asyncio.sleep(int(headers.get(b"retry-after", b"1")))
            if headers.get(b"connection") == b"close":
                conn[1].close()
                conn = None
    finally:
        if conn is not None:
            conn[1].close()


# -- CPU of the game's processes ---------------------------------------------------------------


class CpuTrace:
    """Every process's CPU seconds (and its main thread's wait for a CPU, ``@wait``)
    sampled every :data:`CPU_SAMPLE_S`, to read any window: the server's (``up`` and its
    children, by role) and the clients' (``bench``, this process, and ``mash…``, the
    masher processes of the row)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, "bench": os.getpid()}
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._last: dict[str, float] = {}

    def sample(self) -> None:
        cpu: dict[str, float] = {}
        for role, pid in self.pids.items():
            # a process gone since (a masher process after its row) keeps its last figure
            cpu[role] = proc_cpu_seconds(pid) or self._last.get(role, 0.0)
            cpu[f"{role}@wait"] = proc_runqueue_wait_seconds(pid) or self._last.get(
                f"{role}@wait", 0.0
            )
        self._last = cpu
        self.samples.append((time.monotonic(), cpu))

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(CPU_SAMPLE_S)

    def over(self, t0: float, t1: float) -> dict[str, float]:
        """Cores each role used on average over [t0, t1], and ``server`` / ``client``:
        the sums of both sides."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return {}
        (a, ca), (b, cb) = inside[0], inside[-1]
        out = {role: round((cb[role] - ca[role]) / (b - a), 3) for role in ca if role in cb}
        cores = {k: v for k, v in out.items() if "@" not in k}
        client = {k: v for k, v in cores.items() if is_client(k)}
        if any(k.startswith("mash") for k in client):
            out["mash"] = round(sum(v for k, v in client.items() if k.startswith("mash")), 3)
        out["client"] = round(sum(client.values()), 3)
        out["server"] = round(sum(v for k, v in cores.items() if not is_client(k)), 3)
        return out


def is_client(role: str) -> bool:
    return role == "bench" or role.startswith("mash")


class DoorTrace:
    """The web's door, from its /metrics every half second: its bound and what it holds."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.samples: list[tuple[float, dict[str, float]]] = []

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base, trust_env=False, timeout=5) as http:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    text = (await http.get("/metrics")).text
                    got: dict[str, float] = {}
                    for line in text.splitlines():
                        if line.startswith("codemojex_door_limit "):
                            got["limit"] = float(line.split()[-1])
                        elif line.startswith("codemojex_door_requests_now{"):
                            got[line.split('"')[1]] = float(line.split()[-1])
                    self.samples.append((time.monotonic(), got))
                await asyncio.sleep(0.5)

    def over(self, t0: float, t1: float) -> dict[str, float]:
        inside = [g for t, g in self.samples if t0 <= t <= t1 and g]
        if not inside:
            return {}
        keys = inside[0].keys()
        return {k: round(sum(g.get(k, 0) for g in inside) / len(inside), 1) for k in keys}


def game_pids(up: Up) -> dict[str, int]:
    """Every process of the server by role: ``up`` itself, ``web``, ``valkey``,
    ``workerN``, and any other child as ``proc<pid>``."""
    out: dict[str, int] = {"up": up.proc.pid} if up.proc is not None else {}
    workers = 0
    for pid in sorted(up.track()):
        line = cmdline(pid)
        if "codemojex web" in line and "web" not in out:
            out["web"] = pid
        elif "valkey-server" in line:
            out["valkey"] = pid
        elif "worker" in line and "python" in line:
            workers += 1
            out[f"worker{workers}"] = pid
        else:
            out[f"proc{pid}"] = pid
    return out


def cpus_allowed(pid: int) -> str:
    """The CPUs ``pid`` may run on (``Cpus_allowed_list`` of /proc/<pid>/status)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return "?"


def pinning(pids: dict[str, int]) -> dict[str, str]:
    """Each role's allowed CPUs, for the processes alive now."""
    return {role: cpus_allowed(pid) for role, pid in pids.items() if cpus_allowed(pid) != "?"}


# -- rows ----------------------------------------------------------------------------------------


async def stream_length(up: Up) -> int | None:
    """The events streams' length (XLEN summed over the queue's ``…:events`` keys): what
    a replay from the start would read."""
    if not up.valkey_url:
        return None
    conn = redis.asyncio.Redis.from_url(up.valkey_url)
    try:
        total = 0
        async for key in conn.scan_iter(match="emq:*:events", count=1000):
            total += int(await conn.xlen(key))
        return total
    except redis.exceptions.RedisError:
        return None
    finally:
        await conn.aclose()


async def replay_row(up: Up, honest: Honest, opts: Options, sockets: int) -> dict[str, Any]:
    """The issue's replay loop: one player, from an address of its own, reconnecting
    ``sockets`` sockets in a loop with ``after=0`` (every retained event after the
    stream's start), each reading its greeting and replay, then closing, while the
    honest load runs. The loop runs in this process: it is light on the client (a socket
    reads a few frames) and the replay's work is the server's."""
    transport = httpx.AsyncHTTPTransport(local_address=REPLAY_ADDRESS)
    base = front_base(up, opts)
    async with httpx.AsyncClient(base_url=base, transport=transport, trust_env=False) as http:
        r = await http.post("/api/players", json={"name": "replayer"})
        r.raise_for_status()
        token = r.json()["token"]
    events = await stream_length(up)
    ws = "ws" + base.removeprefix("http")
    url = f"{ws}/ws?token={quote(token)}&after=0"
    stop = asyncio.Event()
    seen: Counter[str] = Counter()

    async def loop() -> None:
        while not stop.is_set():
            try:
                async with connect(
                    url,
                    compression=None,
                    max_size=1 << 24,
                    local_addr=(REPLAY_ADDRESS, 0),
                    open_timeout=10,
                ) as sock:
                    seen["connects"] += 1
                    while True:
                        async with asyncio.timeout(REPLAY_QUIET_S):
                            raw = await sock.recv()
                        data = raw if isinstance(raw, bytes) else raw.encode()
                        seen["frames"] += 1
                        if b'"type":"gap"' in data:
                            seen["gaps"] += 1
                        if b'"type":"progress"' in data:
                            break
            except TimeoutError:
                continue  # quiet: the greeting is over
            except Exception as exc:  # noqa: BLE001 - a refused or closed socket, counted
                seen[type(exc).__name__] += 1
                await asyncio.sleep(0.05)

    t0 = time.monotonic()
    loops = [asyncio.create_task(loop()) for _ in range(sockets)]
    try:
        await honest.run_until(opts.honest_rate, t0 + opts.duration)
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
    return {
        "window": (t0, t0 + opts.duration),
        "mashers": None,
        "replay": {"sockets": sockets, "events_in_stream": events, **seen},
        "verdict": "",
        "exit": 0,
    }


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


async def masher_row(
    up: Up,
    honest: Honest,
    opts: Options,
    cpu: CpuTrace,
    mashers: int,
    addresses: int,
    out_dir: Path,
) -> dict[str, Any]:
    """Mashers from processes of their own (one per 100 mashers, or ``--masher-procs``),
    started from this process and so on its CPU, while the honest load runs here."""
    procs = opts.masher_procs or max(1, -(-mashers // 100))
    procs = min(procs, mashers)
    everyone = [masher_address(i, addresses) for i in range(mashers)]
    children = []
    for j in range(procs):
        spec = MasherSpec(
            port=opts.front_port or up.port,
            round_id=honest.round_id,
            palette=honest.palette,
            length=honest.length,
            addresses=everyone[j::procs],
            in_flight=opts.masher_in_flight,
            duration=opts.duration,
            seed=opts.seed + j,
            name=f"masher-{mashers}-{addresses}-{j}",
        )
        spec_path = out_dir / f"mash-{mashers}-{addresses}-{j}.json"
        spec_path.write_bytes(orjson.dumps(asdict(spec)))
        out_path = spec_path.with_suffix(".out.json")
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bench.bench_door", "masher-child"),
            *(str(spec_path), str(out_path)),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        cpu.pids["mash" if j == 0 else f"mash{j + 1}"] = proc.pid
        children.append((proc, out_path, cpus_allowed(proc.pid)))
    started = time.monotonic()
    waited = asyncio.ensure_future(asyncio.gather(*(p.communicate() for p, _, _ in children)))
    await honest.run_until(opts.honest_rate, waited)
    outputs = await waited
    pinned = {f"mash{j + 1}": cpus for j, (_, _, cpus) in enumerate(children)}
    results = []
    for (proc, out_path, _), (_, stderr) in zip(children, outputs, strict=True):
        if proc.returncode != 0 or not out_path.exists():
            why = stderr.decode(errors="replace").strip().splitlines()[-1:]
            return {
                "window": (started, time.monotonic()),
                "mashers": None,
                "verdict": f"mash failed: {why[0] if why else '?'}",
                "exit": proc.returncode or 1,
            }
        results.append(orjson.loads(out_path.read_bytes()))
    # The processes' load windows on the wall clock, on this process's monotonic clock.
    shift = time.monotonic() - time.time()
    start = min(r["load_started_at"] for r in results) + shift
    end = max(r["load_started_at"] + r["load_s"] for r in results) + shift
    statuses: Counter[str] = Counter()
    for r in results:
        statuses.update(r["statuses"])
    total = {k: sum(r[k] for r in results) for k in ("submitted", "accepted", "lost", "doubled")}
    scored = sum(r["scored"] for r in results)
    return {
        "window": (start, end),
        "mashers": {
            **total,
            "statuses": dict(sorted(statuses.items())),
            "overloaded": statuses.get("503", 0),
            "rate_limited": statuses.get("429", 0),
            "processes": procs,
            "pinned": pinned,
        },
        "verdict": f"lost: {total['lost']}, doubled: {total['doubled']}, "
        f"accepted: {total['accepted']}, scored: {scored}",
        "exit": 0 if total["lost"] == total["doubled"] == 0 else 1,
    }


async def run_rows(
    up: Up, honest: Honest, opts: Options, cpu: CpuTrace, door: DoorTrace, out_dir: Path
) -> list[dict[str, Any]]:
    rows = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(),
        disable=not opts.progress,
        transient=False,
    )
    with progress:
        bar = progress.add_task("rows", total=len(opts.rows))
        for spec in opts.rows:
            mashers, addresses = spec[0], spec[1]
            spread = len(spec) > 2 and bool(spec[2])
            progress.update(bar, description=f"row: {row_label(mashers, addresses, spread)}")
            honest.spread = addresses if spread else 0
            if mashers == REPLAY:
                row = await replay_row(up, honest, opts, addresses)
            elif mashers:
                row = await masher_row(up, honest, opts, cpu, mashers, addresses, out_dir)
            else:
                t0 = time.monotonic()
                await honest.run_until(opts.honest_rate, t0 + opts.duration)
                row = {
                    "window": (t0, t0 + opts.duration),
                    "mashers": None,
                    "verdict": "",
                    "exit": 0,
                }
            honest.spread = 0
            await asyncio.sleep(SETTLE_S)  # the window's last scores arrive
            t0, t1 = row.pop("window")
            figures = honest_figures(honest, t0, t1)
            cores = cpu.over(t0, t1)
            accepted = figures["accepted"] + (row["mashers"] or {}).get("accepted", 0)
            row |= {
                "mashers_n": mashers,
                "addresses": addresses,
                "spread": spread,
                "honest": figures,
                "cores": cores,
                "cpu_ms_per_accepted": {
                    side: round(cores[side] * (t1 - t0) * 1000 / accepted, 3)
                    for side in ("server", "client")
                    if accepted and side in cores
                },
                "door": door.over(t0, t1),
                "pinned": pinning({k: v for k, v in cpu.pids.items() if not k.startswith("mash")}),
            }
            for role in [r for r in cpu.pids if r.startswith("mash")]:
                del cpu.pids[role]
            rows.append(row)
            progress.advance(bar)
    return rows


# -- the cost of an answer -------------------------------------------------------------------------


async def _web_cpu(up: Up, pid: int, burst: Any) -> tuple[float, float]:
    """(web CPU seconds, wall seconds) of ``await burst()``."""
    c0, t0 = proc_cpu_seconds(pid) or 0.0, time.monotonic()
    await burst()
    return (proc_cpu_seconds(pid) or 0.0) - c0, time.monotonic() - t0


async def costs(up: Up, honest: Honest, pid: int, n: int, door_slots: int) -> dict[str, Any]:
    """Web CPU per answer of each kind, the web's idle CPU over as long subtracted."""

    async def idle_rate() -> float:
        cpu, wall = await _web_cpu(up, pid, lambda: asyncio.sleep(2.0))
        return cpu / wall

    idle = await idle_rate()
    out: dict[str, Any] = {"idle_cores": round(idle, 4)}
    async with httpx.AsyncClient(
        base_url=up.base,
        trust_env=False,
        timeout=30,
        limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
    ) as http:
        # Accepted: fresh players guessing at 2 a second each (well inside their rate).
        tokens = [
            (await http.post("/api/players", json={"name": f"cost-{i}"})).json()["token"]
            for i in range(50)
        ]
        body = {"round_id": honest.round_id, "guess": honest.palette[: honest.length]}

        async def guess(token: str) -> int:
            r = await http.post(
                "/api/guesses", json=body, headers={"Authorization": f"Bearer {token}"}
            )
            return r.status_code

        statuses: Counter[int] = Counter()

        async def accepted_burst() -> None:
            per_player = max(1, n // len(tokens))
            for _ in range(per_player):
                statuses.update(await asyncio.gather(*(guess(t) for t in tokens)))
                await asyncio.sleep(0.5)

        cpu, wall = await _web_cpu(up, pid, accepted_burst)
        out["accepted"] = _cost(cpu - idle * wall, statuses[202], statuses)
        await asyncio.sleep(1.0)
        # Refused by the bucket mirror: one player over its rate, ignoring Retry-After.
        token = tokens[0]
        statuses = Counter()

        async def refused_burst() -> None:
            # Eight loops until the bucket is spent (its burst, and what refills while the
            # door sheds some of them: a sender past an honest pace is heavy, and its
            # address's share under overload is bounded; a shed answer is held a second,
            # so the loops run apart, not in lockstep); the rest are refusals.
            spent = asyncio.Event()

            async def spend() -> None:
                for _ in range(200):
                    if spent.is_set():
                        return
                    status = await guess(token)
                    statuses[status] += 1
                    if status == 429:
                        spent.set()

            await asyncio.gather(*(spend() for _ in range(8)))
            for _ in range(n // 8):
                statuses.update(await asyncio.gather(*(guess(token) for _ in range(8))))

        cpu, wall = await _web_cpu(up, pid, refused_burst)
        out["refused_429"] = _cost(cpu - idle * wall, statuses[429], statuses)
    # Shed from the door's queue: slow requests hold every slot, so requests from another
    # address wait --door-wait-ms in the queue and are answered 503 overloaded.
    out["overloaded_503"] = await _queue_refusals(up, pid, idle, n, door_slots)
    return out


async def _queue_refusals(up: Up, pid: int, idle: float, n: int, slots: int) -> dict[str, Any]:
    with sql_write_locked(up.data_dir / SQLITE_FILENAME):
        return await _queue_refusals_held(up, pid, idle, n, slots)


async def _queue_refusals_held(up: Up, pid: int, idle: float, n: int, slots: int) -> dict[str, Any]:
    held = []
    # New players waiting for the SQL write lock, each holding a slot: twice the bound,
    # since light requests (these, at an honest pace) may hold that many.
    for i in range(2 * slots):
        _, writer = await slow_request(up.port, f"127.0.0.{200 + i % 50}")
        held.append(writer)
    await asyncio.sleep(0.3)
    statuses: Counter[int] = Counter()
    wave = 48  # under --address-in-flight's default, so only the queue refuses them
    # Two waves at once, each from an address of its own, while the slow requests hold the
    # slots: waves one after the other outlived them (the second was answered 200, and
    # half of what this measured were 200s), and a wave sent again at once from the same
    # address would meet the door's longer holds for senders that do not wait.
    waves = [
        httpx.AsyncClient(
            base_url=up.base,
            trust_env=False,
            timeout=30,
            limits=httpx.Limits(max_connections=wave, max_keepalive_connections=wave),
            transport=httpx.AsyncHTTPTransport(local_address=f"127.0.0.{10 + i}"),
        )
        for i in range(min(max(1, n // wave), 2))
    ]
    try:

        async def burst() -> None:
            got = await asyncio.gather(
                *(http.get("/api/round") for http in waves for _ in range(wave))
            )
            statuses.update(r.status_code for r in got)

        cpu, wall = await _web_cpu(up, pid, burst)
    finally:
        for http in waves:
            await http.aclose()
    for writer in held:
        writer.close()
    return _cost(cpu - idle * wall, statuses[503], statuses)


def _cost(cpu_s: float, count: int, statuses: Counter[int]) -> dict[str, Any]:
    return {
        "count": count,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "web_cpu_ms_each": round(max(0.0, cpu_s) * 1000 / count, 3) if count else None,
    }


# -- report ------------------------------------------------------------------------------------


def _f(x: Any, unit: str = "") -> str:
    return "—" if x is None else f"{x:,}{unit}"


def baseline(rows: list[dict[str, Any]], figure: str) -> float | None:
    """The honest p99 alone: the median of the alone rows' (the first and the last, by
    default: a shared machine's quiet and busy spells fall on either)."""
    got = [r["honest"][figure]["p99"] for r in rows if not r["mashers_n"]]
    alone: list[float] = sorted(float(x) for x in got if x is not None)
    if not alone:
        return None
    mid = len(alone) // 2
    return alone[mid] if len(alone) % 2 else (alone[mid - 1] + alone[mid]) / 2


def _side(r: dict[str, Any], side: str) -> str:
    cores = r["cores"].get(side)
    each = r.get("cpu_ms_per_accepted", {}).get(side)
    return f"{_f(cores)} / {_f(each)}"


def print_tables(result: dict[str, Any], console: Console) -> None:
    rows = result["rows"]
    base = baseline(rows, "send_to_score_ms")
    base_202 = baseline(rows, "send_to_202_ms")
    t = Table(
        title="Honest players beside mashers (ratios to the honest players alone, the median "
        "of the alone rows of the same run)",
        title_justify="left",
    )
    for col in (
        "mashers",
        "honest send→score p50 / p99 ms",
        "× alone",
        "p99 after 3 s",
        "honest send→202 p99 ms",
        "× alone",
        "honest accepted",
        "honest other answers",
        "what the mashers were told",
        "server: cores / CPU ms per accepted guess",
        "clients: cores / CPU ms per accepted guess",
        "web waited for a CPU",
        "door bound / working / waiting",
        "mash verdict",
    ):
        t.add_column(
            col,
            justify="left"
            if col
            in ("mashers", "mash verdict", "what the mashers were told", "honest other answers")
            else "right",
        )
    for r in rows:
        h = r["honest"]
        p99 = h["send_to_score_ms"]["p99"]
        p99_202 = h["send_to_202_ms"]["p99"]
        share = h["accepted_share"]
        m = r["mashers"]
        told = ", ".join(f"{v:,} × {k}" for k, v in m["statuses"].items()) if m else "—"
        replay = r.get("replay")
        if replay is not None:
            told = f"{replay.get('connects', 0):,} connects, {replay.get('gaps', 0):,} gaps" + (
                f" ({replay['events_in_stream']:,} events in the stream)"
                if replay.get("events_in_stream") is not None
                else ""
            )
        verdict = r["verdict"].split(", kills")[0] if r["verdict"] else ""
        t.add_row(
            row_label(r["mashers_n"], r["addresses"], r.get("spread", False)),
            f"{_f(h['send_to_score_ms']['p50'])} / {_f(p99)}",
            f"{p99 / base:.1f}×" if p99 and base else "—",
            _f(h["steady_send_to_score_p99_ms"]),
            _f(p99_202),
            f"{p99_202 / base_202:.1f}×" if p99_202 and base_202 else "—",
            f"{h['accepted']:,} of {h['sent']:,} ({100 * share:.1f} %)"
            if share is not None
            else "—",
            ", ".join(f"{v} × {k}" for k, v in h["not_accepted"].items()) or "none",
            told,
            _side(r, "server"),
            _side(r, "client"),
            _f(round(100 * r["cores"].get("web@wait", 0), 1), " %"),
            " / ".join(_f(r["door"].get(k)) for k in ("limit", "working", "waiting")),
            verdict + ("" if r["exit"] == 0 else f" (exit {r['exit']})"),
        )
    console.print(t)
    console.print(pinned_line(result))
    c = result["costs"]
    if c is None:
        return
    t = Table(
        title="What an answer costs the web process (CPU from /proc, idle subtracted)",
        title_justify="left",
    )
    for col in ("answer", "count", "web CPU ms each", "of an accepted guess", "statuses"):
        t.add_column(col, justify="left" if col in ("answer", "statuses") else "right")
    acc = c["accepted"]["web_cpu_ms_each"]
    for name, label in (
        ("accepted", "202 accepted guess"),
        ("refused_429", "429 rate_limited, from the bucket mirror (no Valkey)"),
        ("overloaded_503", "503 overloaded, shed from the door's queue"),
    ):
        each = c[name]["web_cpu_ms_each"]
        t.add_row(
            label,
            f"{c[name]['count']:,}",
            _f(each),
            f"{each / acc:.2f}" if each is not None and acc else "—",
            str(c[name]["statuses"]),
        )
    console.print(t)
    m = result["machine"]
    console.print(
        f"web idle {c['idle_cores']} cores · machine: {m.get('cpu', '?')}, "
        f"{m.get('cores', '?')} cores, shared · {len(rows)} rows of "
        f"{result['options']['duration']} s on one `codemojex up`"
    )


def pinned_line(result: dict[str, Any]) -> str:
    """Where each side ran, as /proc said at each row's end (every server process) and at
    each masher process's start."""
    server = sorted(
        {c for r in result["rows"] for k, c in r.get("pinned", {}).items() if k != "bench"}
    )
    client = sorted(
        {r["pinned"]["bench"] for r in result["rows"] if "bench" in r.get("pinned", {})}
        | {c for r in result["rows"] for c in ((r["mashers"] or {}).get("pinned") or {}).values()}
    )
    pin = result.get("pin")
    head = f"pinned: server on CPU {pin[0]}, clients on CPU {pin[1]}" if pin else "not pinned"
    if result.get("nginx"):
        head = f"through nginx (compose's config, on the server's side) · {head}"
    return (
        f"{head}; Cpus_allowed_list seen: server processes {', '.join(server) or '—'}, "
        f"client processes {', '.join(client) or '—'}"
    )


# -- main ----------------------------------------------------------------------------------------


def front_base(up: Up, opts: Options) -> str:
    """Where the clients send: nginx in front of the web (``--nginx``), else the web."""
    return f"http://127.0.0.1:{opts.front_port}" if opts.front_port else up.base


async def measure(
    opts: Options, up: Up, out_dir: Path, proxy: Sequence[tuple[str, int]] = ()
) -> dict[str, Any]:
    """Every row, then the costs. ``proxy``: the roles and pids of nginx's processes in
    front of the web, counted as the server's."""
    rng = random.Random(opts.seed)
    honest = Honest(front_base(up, opts), opts.players, rng)
    await honest.setup()
    pids = game_pids(up)
    cpu = CpuTrace(pids | dict(proxy))
    door = DoorTrace(up.base)
    tracer = asyncio.create_task(cpu.run())
    door_tracer = asyncio.create_task(door.run())
    try:
        rows = await run_rows(up, honest, opts, cpu, door, out_dir)
        cost = (
            await costs(up, honest, pids["web"], opts.cost_requests, opts.door_slots)
            if opts.costs
            else None
        )
    finally:
        tracer.cancel()
        door_tracer.cancel()
        await honest.close()
    return {"rows": rows, "costs": cost}


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=ROWS, help=f"mashers:addresses,… ({ROWS})")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per row (8)")
    p.add_argument("--players", type=int, default=100, help="honest players (100)")
    p.add_argument("--honest-rate", type=float, default=30.0, help="honest guesses a second (30)")
    p.add_argument("--masher-in-flight", type=int, default=8, help="requests per masher (8)")
    p.add_argument(
        "--up-arg",
        action="append",
        default=[],
        help="an extra `up` flag, e.g. --up-arg=--door-in-flight=32",
    )
    p.add_argument("--cost-requests", type=int, default=600, help="answers per cost burst (600)")
    p.add_argument(
        "--masher-procs", type=int, default=0, help="masher processes a row (0: one per 100)"
    )
    p.add_argument("--no-costs", action="store_true", help="skip the cost of an answer")
    p.add_argument(
        "--no-pin",
        action="store_true",
        help=f"leave the processes where the kernel puts them (default: the server on CPU "
        f"{SERVER_CPU}, this process and its mashers on CPU {CLIENT_CPU})",
    )
    p.add_argument(
        "--server-rev",
        default=None,
        metavar="REV",
        help="run the server of git revision REV (a temporary worktree), this bench's clients",
    )
    p.add_argument(
        "--nginx",
        action="store_true",
        help="send every row through Debian's nginx with compose's config "
        "(harness/nginx.py), on the server's CPU",
    )
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    opts = Options(
        rows=parse_rows(a.rows),
        duration=a.duration,
        players=a.players,
        honest_rate=a.honest_rate,
        masher_in_flight=a.masher_in_flight,
        up_args=a.up_arg,
        cost_requests=a.cost_requests,
        progress=not a.no_progress,
        door_slots=_door_slots(a.up_arg),
        masher_procs=a.masher_procs,
        costs=not a.no_costs,
        pin=not a.no_pin,
        nginx=a.nginx,
        server_rev=a.server_rev,
        json=a.json,
    )
    return opts


def _door_slots(up_args: list[str]) -> int:
    for arg in up_args:
        if arg.startswith("--door-in-flight="):
            return int(arg.split("=", 1)[1])
    return 16


def start_pinned(up: Up, pin: bool) -> tuple[int, int] | None:
    """Start ``up`` on :data:`SERVER_CPU` (it forks every child from there, so they all run
    on it) and keep this process, and the masher processes it starts, on
    :data:`CLIENT_CPU`; on a machine with fewer than two CPUs, leave both where they are."""
    if not pin or len(os.sched_getaffinity(0)) < 2:
        up.start()
        return None
    os.sched_setaffinity(0, {SERVER_CPU})
    try:
        up.start()
    finally:
        os.sched_setaffinity(0, {CLIENT_CPU})
    return SERVER_CPU, CLIENT_CPU


def start_nginx(stack: contextlib.ExitStack, up: Up, cpus: tuple[int, int] | None) -> Nginx:
    """nginx with compose's config in front of the web, on the server's CPU when pinned."""
    from harness.nginx import running_nginx

    if cpus is not None:
        os.sched_setaffinity(0, {cpus[0]})
    try:
        return stack.enter_context(running_nginx([("127.0.0.1", up.port)]))
    finally:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[1]})


def nginx_pids(master: int) -> dict[str, int]:
    out = {"nginx": master}
    for i, pid in enumerate(sorted(descendants(master))):
        out[f"nginx{i + 1}"] = pid
    return out


def check_pinned(up: Up, cpus: tuple[int, int] | None, proxy: dict[str, int] | None = None) -> None:
    """Every server process on its CPU, or say which is not (a benchmark then measures the
    client's share of the server's core)."""
    if cpus is None:
        return
    server = game_pids(up) | (proxy or {})
    wrong = {r: c for r, c in pinning(server).items() if c != str(cpus[0])}
    if wrong:
        raise SystemExit(f"server processes not on CPU {cpus[0]}: {wrong}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["masher-child"]:
        return masher_child(Path(argv[1]), Path(argv[2]))
    opts = parse(argv)
    console = Console(highlight=False, width=200)
    with tempfile.TemporaryDirectory(prefix="bench-door-") as tmp, contextlib.ExitStack() as stack:
        root = ROOT
        if opts.server_rev:
            from bench.bench_game import baseline_tree

            root = stack.enter_context(baseline_tree(opts.server_rev, Path(tmp) / "server")).path
        # Behind nginx the web takes the client's address from its X-Forwarded-For.
        trust = ["--forwarded-allow-ips", "127.0.0.1"] if opts.nginx else []
        up = Up(
            Path(tmp) / "data",
            *("--round-seconds", str(ROUND_SECONDS), *trust, *opts.up_args),
            root=root,
        )
        try:
            cpus = start_pinned(up, opts.pin)
            up.wait_ready(60)
            proxy: dict[str, int] = {}
            if opts.nginx:
                nginx = start_nginx(stack, up, cpus)
                opts.front_port = nginx.port
                proxy = nginx_pids(nginx.proc.pid)
            check_pinned(up, cpus, proxy)
            result = asyncio.run(measure(opts, up, Path(tmp), list(proxy.items())))
            check_pinned(up, cpus, proxy)
        finally:
            with contextlib.suppress(Exception):
                up.stop()
            up.kill_everything()
    result |= {"options": asdict(opts), "machine": machine(), "pin": cpus, "nginx": opts.nginx}
    print_tables(result, console)
    if opts.json is not None:
        opts.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
