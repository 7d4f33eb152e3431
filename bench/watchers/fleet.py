"""The parent's side (bench_game ``--watchers N``): the watcher processes, their marks, and
the crowd's figures over a window."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.common import ROOT
from bench.watchers.watcher import CLOSE_TIMEOUT_S


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
        root = str(ROOT)
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
