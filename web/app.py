"""``create_app(config)``: the Starlette app of one web process (docs/contract.md §4).

The lifespan connects the :class:`~codemojex.game.Game` (Valkey + SQL), starts the hub
(the one events reader of this process) and closes both at shutdown. Routes live in
``web.api`` (players), ``web.admin``, ``web.ws``; errors are mapped in ``web.errors``, and
every HTTP request passes ``web.edge``.

Serve it with :func:`web.server.server_config`, the one builder of uvicorn's settings
(``up``, ``web``, the tests and the chaos harness all use it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from codemojex.config import Config
from codemojex.errors import CodemojexError, Unauthorized
from codemojex.game import Game
from codemojex.metrics import metrics_authorized
from web import admin, api, intake, ws
from web.door.collector import GateCollector
from web.door.gate import Gate
from web.door.middleware import Door
from web.edge import Edge
from web.errors import BACKEND_ERRORS, on_backend_error, on_game_error, on_http_error
from web.hub import Hub
from web.metrics import Metrics, RouteMetrics
from web.openapi import openapi_document
from web.replay import Replays
from web.responses import JSONResponse
from web.services import Services, guess_refused_locally, services_of, token_known

log = logging.getLogger("codemojex.web")

STATIC_DIR = Path(__file__).with_name("static")
METRICS_QUEUE_TIMEOUT_S = 2.0


async def index(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def admin_page(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "admin.html", headers={"Cache-Control": "no-cache"})


async def metrics(request: Request) -> Response:
    services = services_of(request)
    # CODEMOJEX_METRICS_TOKEN set: a scraper's bearer token, checked before any Valkey work.
    if not metrics_authorized(request.headers.get("authorization"), services.config.metrics_token):
        raise Unauthorized("the metrics token is required")
    try:
        async with asyncio.timeout(METRICS_QUEUE_TIMEOUT_S):
            await services.metrics.refresh_queue(services.game.queues)
    except BACKEND_ERRORS as exc:
        # The process's own metrics are still worth a scrape; codemojex_queue_up says 0.
        log.warning("metrics: queue unavailable: %s: %s", type(exc).__name__, exc)
    body, content_type = services.metrics.render(request.headers.get("accept", ""))
    return Response(body, headers={"Content-Type": content_type})


async def openapi(request: Request) -> Response:
    config: Config = services_of(request).config
    # Built on first use, off the event loop (its name patterns walk all of Unicode).
    doc = await asyncio.to_thread(openapi_document, config.length, tuple(config.palette))
    return JSONResponse(doc)


class App(Starlette):
    """The Starlette app, with live sockets kept out of the middleware stack and guesses
    out of the router.

    Every middleware here serves HTTP and passes a websocket through untouched, yet each
    pass leaves a coroutine frame that a socket's task holds for as long as it is open
    (about 6 KB of a socket's ~21 KB, measured with tracemalloc). ``/ws`` goes straight to
    its endpoint, which answers every error itself (:mod:`web.ws`). ``POST /api/guesses``
    goes through the app's own HTTP middleware to a bare endpoint (:mod:`web.intake`)."""

    guesses: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and self.guesses is not None and intake.is_guess(scope):
            scope["app"] = self
            await self.guesses(scope, receive, send)
            return
        if kind == "websocket" and scope["path"] == ws.PATH:
            scope["app"] = self
            await ws.socket_endpoint(WebSocket(scope, receive, send))
            return
        await super().__call__(scope, receive, send)


def create_app(config: Config) -> Starlette:
    """The web app for ``config``; nothing connects until the lifespan starts."""
    admin_token = config.resolve_admin_token()
    meters = Metrics()  # before the lifespan: the request middleware counts into it
    # The door (web/door/): the API requests this process works on at once, who waits.
    gate = Gate(
        limit=config.door_in_flight,
        wait_ms=config.door_wait_ms,
        address_limit=config.address_in_flight,
    )
    meters.registry.register(GateCollector(gate))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The queue layout was checked before the server started (codemojex web/up), and
        # is checked again on the first guess (Game.submit) if Valkey was down then.
        game = Game.connect(config)
        hub = Hub(game, meters)
        hub.start()
        app.state.services = Services(config, game, hub, meters, admin_token, Replays(game), gate)
        app.state.door = gate
        try:
            yield
        finally:
            await hub.close()
            await game.close()

    routes: list[BaseRoute] = [
        *api.routes,
        *admin.routes,
        *ws.routes,
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        Route("/admin", admin_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    handlers: dict[Any, Any] = {
        CodemojexError: on_game_error,
        HTTPException: on_http_error,
        **{cls: on_backend_error for cls in BACKEND_ERRORS},
    }
    http = [
        Middleware(RouteMetrics, metrics=meters),
        Middleware(Edge),
        Middleware(
            Door,
            gate=gate,
            peek=guess_refused_locally,
            known=token_known,
            allowed_origins=config.allowed_origins,
        ),
    ]
    app = App(routes=routes, middleware=http, exception_handlers=handlers, lifespan=lifespan)
    app.guesses = intake.guess_stack(http)
    return app
