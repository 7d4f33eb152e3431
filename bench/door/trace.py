"""What the run watches while a row runs: every process's CPU by role, the door's counters,
the CPUs each process may run on, the score stream's length."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import httpx
import redis.asyncio
import redis.exceptions

from bench.door.options import CPU_SAMPLE_S
from harness.procs import proc_cpu_seconds, proc_runqueue_wait_seconds
from harness.running import Up, cmdline

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
