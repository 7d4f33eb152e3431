"""``create_app(config)``: the Starlette app of one web process (CONTRACT §4).

The lifespan connects the :class:`~codemojex.game.Game` (Valkey + SQL), starts the hub
(the one events reader of this process) and closes both at shutdown. Routes live in
``web.api`` (players), ``web.admin``, ``web.ws``; errors are mapped in ``web.errors``.

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
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemojex.config import Config
from codemojex.errors import CodemojexError
from codemojex.game import Admin, Game
from web import admin, api, ws
from web.errors import (
    BACKEND_ERRORS,
    Guard,
    on_backend_error,
    on_game_error,
    on_http_error,
)
from web.hub import Hub
from web.metrics import CONTENT_TYPE, Metrics
from web.openapi import openapi_document
from web.services import Services, services_of

log = logging.getLogger("codemojex.web")

STATIC_DIR = Path(__file__).with_name("static")
METRICS_QUEUE_TIMEOUT_S = 2.0

SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy",
     b"default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds the security headers to every HTTP answer, errors included; API answers are
    also marked ``no-store`` (they carry tokens and live state)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        api_path = scope["path"].startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [h for h in SECURITY_HEADERS if h[0] not in present]
                if api_path and b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def index(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def admin_page(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "admin.html", headers={"Cache-Control": "no-cache"})


async def metrics(request: Request) -> Response:
    services = services_of(request)
    snapshot: dict[str, Any] | None = None
    try:
        async with asyncio.timeout(METRICS_QUEUE_TIMEOUT_S):
            snapshot = await Admin(services.game).queue_view()
    except BACKEND_ERRORS as exc:
        # The process's own metrics are still worth a scrape; codemojex_queue_up says 0.
        log.warning("metrics: queue unavailable: %s: %s", type(exc).__name__, exc)
    return Response(services.metrics.render(snapshot), media_type=CONTENT_TYPE)


_OPENAPI = openapi_document()


async def openapi(_request: Request) -> Response:
    return JSONResponse(_OPENAPI)


def create_app(config: Config) -> Starlette:
    """The web app for ``config``; nothing connects until the lifespan starts."""
    admin_token = config.resolve_admin_token()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        game = Game.connect(config)
        meters = Metrics()
        hub = Hub(game, meters)
        hub.start()
        app.state.services = Services(config, game, hub, meters, admin_token)
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
    return Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(Guard)],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
