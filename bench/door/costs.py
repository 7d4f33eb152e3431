"""What a refusal costs the web process against an accepted guess, by the door's answer."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import httpx

from bench.door.honest import Honest
from codemojex.store import SQLITE_FILENAME
from harness.helpers import slow_request, sql_write_locked
from harness.procs import proc_cpu_seconds
from harness.running import Up

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
