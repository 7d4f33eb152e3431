"""What nginx's refusals cost nginx: its workers' CPU per request it proxies and per request
its per-address limit refuses, in the same run; prints figures, asserts nothing.

    flock /tmp/bench.lock uv run python -m bench.bench_nginx [--requests 20000] [--json OUT]

Starts one ``codemojex web`` (embedded Valkey, SQLite) behind Debian's nginx with the config
compose ships (harness/nginx.py), then sends ``GET /api/round`` in pipelined keep-alive
connections of 1,000 requests (nginx's most per connection), 8 at a time:

* **proxied**: ``--requests`` requests, each connection from a loopback address of its own,
  so no address passes its limit_req burst and every request reaches the web process;
* **refused**: one address first spends its burst (not measured), then sends ``--requests``
  more as fast as it can, on at least 8 connections at once (so that a slow web cannot pace
  it under its rate); nginx refuses all but its rate's worth (those few are proxied,
  and their cost at the proxied figure is taken out of the refused one).

CPU is read from ``/proc/<pid>/schedstat`` (nanoseconds on a CPU) of every nginx worker
and of the web process, over each phase; the web's idle CPU over a pause of the refused
phase's length is the baseline its figure is compared with. The client runs on the same
machine and competes for its cores: ratios from one run mean more than the absolute times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import machine
from harness.nginx import (
    Connection,
    Nginx,
    Response,
    connect,
    pipelined_on,
    running_nginx,
)
from harness.running import WebProcess, web_processes

PATH = "/api/round"
PER_CONNECTION = 1000  # nginx's keepalive_requests
AT_ONCE = 8
REFUSING_ADDRESS = "127.0.2.1"


def cpu_ns(pid: int) -> int:
    """Nanoseconds ``pid`` (every thread) has run on a CPU."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _cpu(pids: Sequence[int]) -> int:
    return sum(cpu_ns(p) for p in pids)


async def _send(
    port: int, conns: Sequence[str | Connection], per_connection: int
) -> list[Response]:
    """``per_connection`` pipelined GETs on each of ``conns`` (a source address to connect
    from, or a connection opened beforehand), :data:`AT_ONCE` at a time."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(conn: str | Connection) -> list[Response]:
        async with gate:
            if isinstance(conn, str):
                conn = await connect(conn, port)
            return await pipelined_on(conn, port, [PATH] * per_connection)

    batches = await asyncio.gather(*(one(c) for c in conns))
    return [r for batch in batches for r in batch]


def _cpu_mark(nginx: Nginx, web: WebProcess) -> tuple[int, int, float]:
    return _cpu(nginx.worker_pids()), cpu_ns(web.proc.pid), time.monotonic()


def _figures(
    answers: list[Response], before: tuple[int, int, float], after: tuple[int, int, float]
) -> dict[str, Any]:
    refused = sum(_refused_by_nginx(r) for r in answers)
    return {
        "requests": len(answers),
        "statuses": dict(Counter(r.status for r in answers)),
        "refused": refused,
        "proxied": len(answers) - refused,  # reached the web, whatever it answered
        "nginx_cpu_s": (after[0] - before[0]) / 1e9,
        "web_cpu_s": (after[1] - before[1]) / 1e9,
        "wall_s": after[2] - before[2],
    }


def _phase(nginx: Nginx, web: WebProcess, sources: Sequence[str], per: int) -> dict[str, Any]:
    before = _cpu_mark(nginx, web)
    answers = asyncio.run(_send(nginx.port, sources, per))
    return _figures(answers, before, _cpu_mark(nginx, web))


async def _over_the_limit(
    nginx: Nginx, web: WebProcess, connections: int, per: int, rounds: int = 20
) -> dict[str, Any]:
    """The refusing address spends its burst (not measured), then sends ``per`` requests on
    each of ``connections``, opened beforehand so that no pause comes between: in one,
    nginx's bucket would drain, and a web too slow to pace the address past its rate (a busy
    machine) would then see every request proxied. The burst is spent once nginx refuses
    it; its requests reach the web until then, so this takes as long as the web needs to
    answer a burst and the rate's worth that comes back meanwhile."""
    for _ in range(rounds):
        conns = [await connect(REFUSING_ADDRESS, nginx.port) for _ in range(connections)]
        spent = await _send(nginx.port, [REFUSING_ADDRESS] * AT_ONCE, PER_CONNECTION)
        if any(_refused_by_nginx(r) for r in spent):
            before = _cpu_mark(nginx, web)
            answers = await _send(nginx.port, conns, per)
            return _figures(answers, before, _cpu_mark(nginx, web))
        for _, writer in conns:
            writer.close()
    raise RuntimeError(
        f"nginx refused nothing in {rounds} rounds: the web answers slower than the rate"
    )


def _refused_by_nginx(r: Response) -> bool:
    """nginx's own 503 (the app's would say what the door did, not the address's limit)."""
    return r.status == 503 and b"from this address" in r.body


def _sources(prefix: str, n: int) -> list[str]:
    return [f"{prefix}.{1 + i // 250}.{1 + i % 250}" for i in range(n)]


def measure(requests: int = 20_000, limit_req: tuple[int, int] | None = None) -> dict[str, Any]:
    """Both phases on one web process behind one nginx; the figures (see the module).
    ``limit_req`` (rate per second, burst) replaces the shipped per-address limit."""
    connections = max(1, -(-requests // PER_CONNECTION))
    per = min(requests, PER_CONNECTION)
    # nginx reads a connection's next pipelined request only once the last is answered, so
    # on few connections a slow web paces the address under its rate: it sends on at least
    # as many at once as spent its burst.
    over = max(connections, AT_ONCE)
    per_over = per if over == connections else max(1, -(-requests // over))
    with (
        tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp,
        web_processes(Path(tmp), WebProcess) as start,
    ):
        web = start("--forwarded-allow-ips", "127.0.0.1")
        with running_nginx(
            [("127.0.0.1", web.port)], Path(tmp) / "nginx", limit_req=limit_req
        ) as nginx:
            _phase(nginx, web, _sources("127.10", 2), 200)  # warm both up
            proxied = _phase(nginx, web, _sources("127.20", connections), per)
            refused = asyncio.run(_over_the_limit(nginx, web, over, per_over))
            idle_from = cpu_ns(web.proc.pid)
            time.sleep(refused["wall_s"])
            web_idle_s = (cpu_ns(web.proc.pid) - idle_from) / 1e9
            workers = len(nginx.worker_pids())
    nginx_proxied_us = proxied["nginx_cpu_s"] * 1e6 / max(1, proxied["proxied"])
    web_proxied_us = proxied["web_cpu_s"] * 1e6 / max(1, proxied["proxied"])
    through = refused["proxied"]  # the rate's worth that the limit let through
    n = max(1, refused["refused"])
    # Not clamped: around zero, the noise of a shared machine shows as it is.
    nginx_refused_us = (refused["nginx_cpu_s"] * 1e6 - through * nginx_proxied_us) / n
    web_refused_us = ((refused["web_cpu_s"] - web_idle_s) * 1e6 - through * web_proxied_us) / n
    return {
        "requests": requests,
        "nginx_workers": workers,
        "proxied": proxied,
        "refused": refused,
        "web_idle_cpu_s": web_idle_s,
        "nginx_us_per_proxied": nginx_proxied_us,
        "nginx_us_per_refused": nginx_refused_us,
        "web_us_per_proxied": web_proxied_us,
        "web_us_per_refused": web_refused_us,
        "refused_to_proxied": nginx_refused_us / nginx_proxied_us if nginx_proxied_us else 0.0,
    }


def table(results: dict[str, Any]) -> Table:
    t = Table(title=f"nginx's CPU per request, GET {PATH}, {results['nginx_workers']} workers")
    for col in ("phase", "requests", "refused by nginx", "proxied", "nginx CPU µs/request",
                "× proxied", "web CPU µs/request", "wall s"):  # fmt: skip
        t.add_column(col, justify="left" if col == "phase" else "right")
    for phase, label in (("proxied", "within the limit"), ("refused", "one address over it")):
        p = results[phase]
        us = results[f"nginx_us_per_{phase}"]
        t.add_row(
            label,
            f"{p['requests']:,}",
            f"{p['refused']:,}",
            f"{p['proxied']:,}",
            f"{us:.1f}",
            f"{us / results['nginx_us_per_proxied']:.2f}"
            if results["nginx_us_per_proxied"]
            else "-",
            f"{results[f'web_us_per_{phase}']:.1f}",
            f"{p['wall_s']:.2f}",
        )
    return t


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per phase")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    results = measure(args.requests)
    console = Console(width=160)
    info = machine()
    console.print(f"{info['cpu']}, {info['cores']} cores, load {info['loadavg_1m']:.2f}")
    console.print(table(results))
    console.print(
        f"a refusal costs nginx {results['refused_to_proxied']:.2f}× a proxied request; "
        f"the web process: {results['web_us_per_refused']:.1f} µs per refusal beyond its idle "
        f"({results['web_idle_cpu_s'] * 1e3:.1f} ms idle over {results['refused']['wall_s']:.2f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
