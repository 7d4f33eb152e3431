"""CPU cost of the per-route request metrics (``web.metrics.RouteMetrics``) per request.

Drives a Starlette app shaped like ours (routes with path parameters, the same ``Edge``
wrapper) directly through ASGI — no sockets, no server — with and without the middleware,
alternating rounds so drift on a shared machine hits both alike, and prints CPU time per
request and the difference. Run: ``uv run python bench/bench_route_metrics.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from web.errors import Edge
from web.metrics import Metrics, RouteMetrics


async def _ok(_request: Request) -> Response:
    return Response(b'{"job_id":"JOB_x","seq":0}', status_code=202)


def _app(with_metrics: bool) -> Starlette:
    routes = [
        Route("/api/players", _ok, methods=["POST"]),
        Route("/api/round", _ok, methods=["GET"]),
        Route("/api/guesses", _ok, methods=["GET", "POST"]),
        Route("/api/guesses/{job_id}", _ok, methods=["GET"]),
        Route("/api/leaderboard", _ok, methods=["GET"]),
    ]
    middleware = [Middleware(Edge)]
    if with_metrics:
        middleware.insert(0, Middleware(RouteMetrics, metrics=Metrics()))
    return Starlette(routes=routes, middleware=middleware)


async def _drive(app: Starlette, n: int) -> float:
    """CPU seconds for ``n`` requests (POST /api/guesses and GET /api/guesses/{job_id})."""
    body = b'{"round_id":"RND_x","guess":["a","b","c","d"]}'

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(_message: dict[str, Any]) -> None:
        return None

    scopes = [
        {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8000),
        }
        for method, path in (("POST", "/api/guesses"), ("GET", "/api/guesses/JOB_01ABC"))
    ]
    t0 = time.process_time()
    for i in range(n):
        await app(dict(scopes[i & 1]), receive, send)
    return time.process_time() - t0


async def main(n: int, rounds: int) -> None:
    apps = {False: _app(False), True: _app(True)}
    for app in apps.values():  # warm up (middleware stacks are built on the first call)
        await _drive(app, 1000)
    per: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for flag, app in apps.items():
            per[flag].append(await _drive(app, n) / n * 1e6)
    without, with_ = statistics.median(per[False]), statistics.median(per[True])
    print(f"requests per round {n}, rounds {rounds} (median of rounds, CPU µs per request)")
    print(f"  without RouteMetrics  {without:7.2f} µs")
    print(f"  with RouteMetrics     {with_:7.2f} µs")
    print(f"  cost                  {with_ - without:7.2f} µs per request")
    print(f"  at 1,000 requests/s   {(with_ - without) * 1000 / 1e6 * 100:7.3f} % of one core")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
