"""Shared helpers of the benchmarks: the machine's description, an embedded server that is
always stopped, worker subprocesses that are always reaped, Valkey INFO deltas, and plots
embedded in the HTML reports."""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata
import io
import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

from echomq.server import Allocator, EmbeddedValkey, find_valkey_server

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------
# The machine


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def machine_cores() -> int:
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine(valkey_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """CPU model, cores, RAM, kernel, Python and library versions, Valkey version."""
    cores = machine_cores()
    info = valkey_info or {}
    return {
        "cpu": _cpu_model(),
        "cores": cores,
        "ram_gib": _ram_gib(),
        "kernel": platform.release(),
        "loadavg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "redis_py": _version("redis"),
        "hiredis": _version("hiredis"),
        "orjson": _version("orjson"),
        "valkey": str(info.get("valkey_version") or info.get("redis_version") or "-"),
        "valkey_binary": find_valkey_server(),
    }


# ---------------------------------------------------------------------------------------------
# Stopping cleanly on SIGTERM as on Ctrl-C


def signals_raise_keyboardinterrupt() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt, so either runs the ``finally`` blocks that
    reap the workers and stop the server. SIGINT too, because a shell starts background jobs
    with SIGINT ignored, and asyncio only handles SIGINT where it has its default handler."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


# ---------------------------------------------------------------------------------------------
# The server


@contextlib.contextmanager
def embedded_server(appendfsync: str, allocator: Allocator = "auto") -> Iterator[EmbeddedValkey]:
    """A fresh ``valkey-server`` in a temp dir, stopped (and the dir removed) on any exit;
    ``allocator`` as :class:`EmbeddedValkey`'s (its ``malloc`` says which one ran)."""
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp:
        server = EmbeddedValkey(
            Path(tmp) / "valkey",
            appendfsync=appendfsync,  # type: ignore[arg-type]
            allocator=allocator,
        )
        try:
            server.start()
            yield server
        finally:
            server.stop()


async def command_calls(conn: Any) -> tuple[int, int]:
    """(script calls clients sent: EVALSHA + EVAL, all commands the server ran), from INFO
    commandstats, which also counts the calls that scripts make inside."""
    stats = await conn.info("commandstats")
    scripts = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
    return scripts, sum(int(v.get("calls", 0)) for v in stats.values() if isinstance(v, dict))


async def command_counts(conn: Any) -> dict[str, int]:
    """Calls so far of every command the server ran (INFO commandstats), by lowercase name;
    commands that scripts run inside count under their own names."""
    stats = await conn.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): int(v.get("calls", 0))
        for k, v in stats.items()
        if isinstance(v, dict)
    }


# Commands a benchmark's own measuring sends, and the script calls themselves: left out of
# "commands run inside the scripts".
NOT_INSIDE = frozenset({"evalsha", "eval", "evalsha_ro", "eval_ro", "info", "script|load"})


def inside_scripts(
    before: dict[str, int], after: dict[str, int], less: dict[str, float] | None = None
) -> dict[str, float]:
    """The commands run between two :func:`command_counts`, script calls and INFO left out,
    minus ``less`` (say, the parent's own polls), by name, largest first, zeros dropped."""
    out: dict[str, float] = {}
    for name, calls in after.items():
        if name in NOT_INSIDE:
            continue
        n = calls - before.get(name, 0) - (less or {}).get(name, 0.0)
        if n > 0:
            out[name] = n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


async def server_cpu_seconds(conn: Any) -> float:
    """CPU seconds (user + sys) the server process has used so far."""
    cpu = await conn.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have been busy (from /proc/stat), to tell how
    much of it other work used while we measured."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return 0.0
    ticks = [int(x) for x in fields]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # all but idle and iowait (guest is in user)
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process and its reaped children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


async def used_memory(conn: Any) -> int:
    return int((await conn.info("memory"))["used_memory"])


# ---------------------------------------------------------------------------------------------
# Worker subprocesses: started, released together on "go", always reaped


class WorkerProcs:
    """``n`` copies of ``python -m bench.worker ARGS``. Each prints ``READY`` once set up,
    starts work on a ``go`` line on stdin, stops cleanly on ``stop`` (or stdin EOF, so a
    dead parent never leaves them running) and prints one JSON summary line."""

    def __init__(self, n: int, args: Sequence[str]) -> None:
        self.n = n
        self.args = list(args)
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Self:
        try:
            for _ in range(self.n):
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "bench.worker", *self.args],
                        cwd=ROOT,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=None,  # worker tracebacks show up on our stderr
                        text=True,
                        bufsize=1,
                        # Own process group: a terminal's Ctrl-C reaches only us, and we
                        # stop the workers ourselves (then the server).
                        process_group=0,
                    )
                )
            self._wait_ready(timeout=30.0)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            assert p.stdout is not None
            with selectors.DefaultSelector() as sel:
                sel.register(p.stdout, selectors.EVENT_READ)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or not sel.select(left):
                        raise RuntimeError("a bench worker did not get ready in time")
                    line = p.stdout.readline()
                    if not line:
                        raise RuntimeError(f"a bench worker exited early (code {p.wait()})")
                    if line.strip() == "READY":
                        break

    def _send(self, line: str) -> None:
        for p in self.procs:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                assert p.stdin is not None
                p.stdin.write(line + "\n")
                p.stdin.flush()

    def go(self) -> None:
        self._send("go")

    def stop(self, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Ask every worker to stop, collect their summaries; kill whoever lingers."""
        import json

        self._send("stop")
        summaries: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                out, _ = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            for line in (out or "").splitlines():
                with contextlib.suppress(ValueError):
                    summaries.append(json.loads(line))
        return summaries

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.communicate(timeout=5)

    def __exit__(self, *exc: object) -> None:
        self.kill()


# ---------------------------------------------------------------------------------------------
# HTML reports


def png_data_uri(fig: Any) -> str:
    """A matplotlib figure as a ``data:`` URI, for a self-contained HTML report."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
