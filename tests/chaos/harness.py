"""The chaos suite's machinery: sizes, figures, the fork server's client, worker pools and
the game-side bookkeeping every scenario ends with (expected standings, score rows).

Fixtures live in ``conftest.py``; everything here is plain code the tests call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

import echomq
import echomq.errors
import echomq.ids
from codemojex import store
from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE, feedback, points_for
from codemojex.store.models import ScoreRow
from echomq.server import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
TRANSIENT = echomq.errors.TRANSIENT  # "Valkey is unreachable for now"
ARTIFACT = ROOT / "tests" / "artifacts" / "reliability.json"

# -- sizes ------------------------------------------------------------------------------------

# The switch for the full sizes. An environment variable, not only a command-line option:
# `uv run pytest` from the root loads this directory's conftest during collection, too late
# to register options; `--chaos-full` works when tests/chaos is named on the command line.
FULL = os.environ.get("CODEMOJEX_CHAOS_FULL", "") not in ("", "0", "false", "no")


def size(short: int, full: int) -> int:
    return full if FULL else short


# Short timings (CI): lease 2 s, heartbeat lapse 0.5 s, reap every 0.2 s.
LEASE_MS = 2_000
LAPSE_MS = 500
REAP_MS = 200
EPSILON_MS = 250


def timings_env(
    lease_ms: int = LEASE_MS, lapse_ms: int = LAPSE_MS, reap_ms: int = REAP_MS
) -> dict[str, str]:
    return {
        "CODEMOJEX_LEASE_MS": str(lease_ms),
        "CODEMOJEX_LAPSE_MS": str(lapse_ms),
        "CODEMOJEX_REAP_INTERVAL_MS": str(reap_ms),
    }


# -- figures ----------------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float | None]:
    """min / median / max (None for an empty list), rounded to 0.1."""
    if not values:
        return {"min": None, "median": None, "max": None}
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
    }


class Figures:
    """Each test's counted figures: printed (even without -s) and kept in
    ``tests/artifacts/reliability.json`` by mode (short/full) and scenario, for
    docs/reliability.md."""

    def __init__(self, capsys: pytest.CaptureFixture[str], test: str) -> None:
        self.capsys = capsys
        self.test = test

    def record(self, scenario: str, **figures: Any) -> None:
        entry = {
            "test": self.test,
            "mode": "full" if FULL else "short",
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **figures,
        }
        with self.capsys.disabled():
            print(
                f"\n[chaos] {scenario}: " + ", ".join(f"{k}={v}" for k, v in figures.items()),
                flush=True,
            )
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        # Read-modify-write under an exclusive lock file: tests run one at a time, but a
        # second pytest run may share the checkout.
        with _locked(ARTIFACT.with_suffix(".lock")):
            data: dict[str, Any] = {}
            if ARTIFACT.exists():
                with contextlib.suppress(ValueError):
                    data = json.loads(ARTIFACT.read_text())
            data.setdefault(entry["mode"], {})[scenario] = entry
            tmp = ARTIFACT.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
            tmp.replace(ARTIFACT)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- waiting ----------------------------------------------------------------------------------


async def wait_until(
    pred: Callable[[], Awaitable[bool]], timeout: float, what: str, every: float = 0.05
) -> float:
    """Poll ``pred`` until true; returns the seconds it took. Backend errors while polling
    (a server that is down on purpose) count as "not yet"."""
    start = time.monotonic()
    while True:
        try:
            if await pred():
                return time.monotonic() - start
        except TRANSIENT:
            pass
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not reached within {timeout:.0f} s")
        await asyncio.sleep(every)


# -- the fork server ----------------------------------------------------------------------


class Zygote:
    """Client of ``tests.chaos.zygote``: spawn workers by fork, learn how they exited."""

    def __init__(self, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "CODEMOJEX_TEST_CRASH"}
        self._err = open(log, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.zygote"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl only, no locks
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        first = self.proc.stdout.readline().decode().strip()
        if first != "ready":
            self.close()
            raise RuntimeError(f"zygote did not start ({first!r}); see {log}")
        self._pids: queue.Queue[int] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True, name="zygote-reader")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            parts = raw.decode().split()
            if parts[:1] == ["pid"]:
                self._pids.put(int(parts[1]))
            elif parts[:1] == ["exit"]:
                self._exits[int(parts[1])] = int(parts[2])

    def spawn(
        self,
        role: str,
        worker_id: str,
        log: Path,
        env: dict[str, str] | None = None,
        args: dict[str, Any] | None = None,
    ) -> int:
        cmd = {
            "role": role,
            "worker_id": worker_id,
            "env": env or {},
            "log": str(log),
            "args": args or {},
        }
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
            self.proc.stdin.flush()
            return self._pids.get(timeout=10)

    def exit_code(self, pid: int) -> int | None:
        """How ``pid`` ended (Popen's convention: -9 = SIGKILL), or None while it lives."""
        return self._exits.get(pid)

    async def wait_exit(self, pid: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.exit_code(pid)) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"process {pid} still running after {timeout:.0f} s")
            await asyncio.sleep(0.02)
        return code

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


@dataclass
class Proc:
    worker_id: str
    pid: int
    log: Path
    started: float = field(default_factory=time.monotonic)
    killed: bool = False  # SIGKILLed by the test (not by itself)
    terminated: bool = False  # asked to stop (SIGTERM) by the test
    code: int | None = None


class Pool:
    """Worker processes of one role, spawned through the zygote, killed and respawned."""

    def __init__(
        self,
        zygote: Zygote,
        log_dir: Path,
        role: str = "score_worker",
        env: dict[str, str] | None = None,
        args: dict[str, Any] | None = None,
        prefix: str = "WRK",
    ) -> None:
        self.zygote = zygote
        self.log_dir = log_dir
        self.role = role
        self.env = env or {}
        self.args = args or {}
        self.prefix = prefix
        self.procs: list[Proc] = []
        self.killed = 0
        self.self_died = 0
        self.exit_codes: Counter[int] = Counter()  # of the processes not killed by the test
        log_dir.mkdir(parents=True, exist_ok=True)

    def spawn(self, **env: str) -> Proc:
        wid = (
            echomq.ids.branded(self.prefix)
            if self.prefix == "WRK"
            else (f"{self.prefix}{len(self.procs)}")
        )
        log = self.log_dir / f"{wid}.log"
        args = {**self.args}
        pid = self.zygote.spawn(self.role, wid, log, {**self.env, **env}, args)
        proc = Proc(wid, pid, log)
        self.procs.append(proc)
        return proc

    def live(self) -> list[Proc]:
        self.poll()
        return [p for p in self.procs if p.code is None]

    def poll(self) -> list[Proc]:
        """The processes that ended since the last call."""
        ended = []
        for p in self.procs:
            if p.code is None and (code := self.zygote.exit_code(p.pid)) is not None:
                p.code = code
                ended.append(p)
                if not (p.killed or p.terminated):
                    self.self_died += 1
                    self.exit_codes[code] += 1
        return ended

    def kill(self, proc: Proc, sig: signal.Signals = signal.SIGKILL) -> None:
        if sig == signal.SIGKILL:
            proc.killed = True
            self.killed += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)

    async def stop_all(self, timeout: float = 15.0) -> None:
        """SIGTERM every live process (SIGCONT first, in case one is frozen); SIGKILL after
        ``timeout``."""
        for p in self.live():
            p.terminated = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.live() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for p in self.live():
            self.kill(p)
        while self.live():
            await asyncio.sleep(0.02)

    def log_text(self) -> str:
        return "".join(p.log.read_text(errors="replace") for p in self.procs if p.log.exists())

    def crashpoints(self) -> Counter[str]:
        """Crash points hit, by point, from the processes' own stderr lines."""
        hits: Counter[str] = Counter()
        for line in self.log_text().splitlines():
            if line.startswith("crashpoint "):
                hits[line.split()[1]] += 1
        return hits


async def registered(game_or_queue: Game | echomq.Queue, worker_id: str) -> bool:
    q = game_or_queue.queue if isinstance(game_or_queue, Game) else game_or_queue
    return await q.conn.zscore(q.keys.workers, worker_id) is not None


# -- the game side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Guess:
    job_id: str
    player_id: str
    round_id: str
    seq: int
    guess: tuple[str, ...]


async def new_players(game: Game, n: int, tag: str = "p") -> list[str]:
    return [(await game.create_player(f"{tag}{i}")).player_id for i in range(n)]


def random_guess(rng: random.Random, secret: tuple[str, ...], solve_p: float = 0.15) -> list[str]:
    if rng.random() < solve_p:
        return list(secret)
    return [rng.choice(DEFAULT_PALETTE) for _ in secret]


async def submit_many(
    game: Game, players: list[str], n: int, rng: random.Random, concurrency: int = 16
) -> list[Guess]:
    """``n`` guesses spread over ``players`` (in the current round), submitted through
    ``Game.submit`` with some concurrency; every one answered is returned."""
    rnd, _ = await game.current_round()
    out: list[Guess] = []
    todo = [rng.choice(players) for _ in range(n)]

    async def one(pid: str) -> None:
        guess = random_guess(rng, rnd.secret)
        acc = await game.submit(pid, rnd.round_id, guess)
        out.append(Guess(acc.job_id, pid, rnd.round_id, acc.seq, tuple(guess)))

    for i in range(0, n, concurrency):
        await asyncio.gather(*(one(pid) for pid in todo[i : i + concurrency]))
    return out


async def expected_standings(game: Game, accepted: list[Guess]) -> dict[str, tuple[int, int]]:
    """player -> (points, solved rounds), straight from the rules, no queue involved."""
    best: dict[tuple[str, str], int] = {}
    for g in accepted:
        rnd = await game.rounds.get(g.round_id)
        assert rnd is not None
        pts = points_for(g.seq, feedback(rnd.secret, g.guess).solved)
        key = (g.player_id, g.round_id)
        best[key] = max(best.get(key, 0), pts)
    out: dict[str, tuple[int, int]] = {}
    for (pid, _), pts in best.items():
        total, solved = out.get(pid, (0, 0))
        out[pid] = (total + pts, solved + (1 if pts > 0 else 0))
    return out


async def standings(game: Game) -> dict[str, tuple[int, int]]:
    board = await store.leaderboard(game.engine, limit=1_000_000)
    return {p["player_id"]: (int(p["points"]), int(p["solved_rounds"])) for p in board}


async def score_rows(game: Game) -> Counter[str]:
    """job_id -> number of score rows (the primary key makes 2 impossible; counted anyway)."""
    async with game.engine.connect() as conn:
        rows = await conn.execute(select(ScoreRow.job_id, func.count()).group_by(ScoreRow.job_id))
        return Counter({jid: int(n) for jid, n in rows})


async def verdict(game: Game, accepted: list[Guess]) -> dict[str, int]:
    """The exactly-once figures: rows, lost, doubled, strays; standings checked too."""
    rows = await score_rows(game)
    ids = {g.job_id for g in accepted}
    lost = sum(1 for j in ids if rows.get(j, 0) == 0)
    doubled = sum(1 for j in ids if rows.get(j, 0) > 1)
    strays = sum(1 for j in rows if j not in ids)
    want = await expected_standings(game, accepted)
    got = await standings(game)
    wrong = sum(1 for pid in set(want) | set(got) if want.get(pid) != got.get(pid))
    return {
        "score_rows": sum(rows.values()),
        "lost": lost,
        "doubled": doubled,
        "strays": strays,
        "wrong_totals": wrong,
    }


# -- the web app ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def serve(config: Any) -> Any:
    """The real app under a real uvicorn on a free port, in this process (as tests/web
    does), until the block ends; yields an httpx client pointed at it."""
    import httpx

    from harness.helpers import free_port
    from web.app import create_app
    from web.server import Server, server_config

    port = free_port()
    server = Server(
        server_config(create_app(config), port=port, log_level="critical", graceful_shutdown_s=2)
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("uvicorn stopped before it started serving")
                await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=15) as http:
            yield http
    finally:
        server.should_exit = True
        await task
