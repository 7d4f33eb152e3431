"""A row measured: the mashers or the replay loop beside the honest players, then the rows in
turn on one ``up``."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from websockets.asyncio.client import connect

from bench.common import ROOT
from bench.door.costs import costs
from bench.door.honest import Honest, honest_figures
from bench.door.mash import MasherSpec
from bench.door.options import (
    REPLAY,
    REPLAY_ADDRESS,
    REPLAY_QUIET_S,
    SETTLE_S,
    Options,
    masher_address,
    row_label,
)
from bench.door.trace import CpuTrace, DoorTrace, cpus_allowed, game_pids, pinning, stream_length
from harness.running import Up


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
