"""The way a guess comes in, over HTTP or the socket: its fields read in one place, its
refusals counted in one place, and ``POST /api/guesses`` served by a lean ASGI endpoint.

The guess is the one request a player sends many times a second, so its HTTP route skips
what serves every other route and nothing of it: Starlette's router (a regex per route
until one matches), its request object and its two exception layers. It still passes the
same door, edge and request metrics as every API request (:func:`guess_stack`), answers in
the contract's order (401, 413, 400, then the game's) and maps every error exactly as the
app's exception handlers do; anything else ends in :class:`web.edge.Edge`'s 503.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from codemojex import tracing
from codemojex.errors import CodemojexError, InvalidBody
from web.errors import (
    BACKEND_ERRORS,
    MAX_BODY_BYTES,
    BodyTooLarge,
    error_response,
    unavailable_response,
)
from web.parsing import bearer_token, guess_fields, idempotency_key, parse_json_object
from web.services import Services

log = logging.getLogger("codemojex.web")

PATH = "/api/guesses"

_JSON = (b"content-type", b"application/json")


def read_guess(services: Services, body: dict[str, Any]) -> tuple[str, object]:
    """``round_id`` and the raw guess of a guess body; a malformed one is counted as a
    refused submission (the game never saw it) and raised as :class:`InvalidBody`."""
    try:
        return guess_fields(body)
    except InvalidBody as exc:
        services.count(exc.code)
        raise


async def _body(scope: Scope, receive: Receive) -> bytes:
    """The request body under ``MAX_BODY_BYTES`` (declared or sent), else 413."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            if value.isdigit() and int(value) > MAX_BODY_BYTES:
                raise BodyTooLarge()
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            text: str = value.decode("latin-1")
            return text
    return None


async def _accept(scope: Scope, receive: Receive, services: Services) -> bytes:
    """The ``202`` body of one guess, or the error that refuses it."""
    player = await services.player(bearer_token(_header(scope, b"authorization")))
    try:
        body = parse_json_object(await _body(scope, receive))
        key = idempotency_key(_header(scope, b"idempotency-key"))
    except InvalidBody as exc:
        services.count(exc.code)
        raise
    round_id, guess = read_guess(services, body)
    accepted = await services.accept_guess(player.player_id, round_id, guess, key)
    return orjson.dumps({"job_id": accepted.job_id, "seq": accepted.seq})


async def submit_guess(scope: Scope, receive: Receive, send: Send) -> None:
    """``POST /api/guesses`` as a bare ASGI app (the module docstring says why)."""
    services = scope["app"].state.services
    assert isinstance(services, Services)
    scope["route"] = ROUTE  # the template the request metrics count it under
    try:
        if tracing.enabled():  # the root of the guess's trace (docs/observability.md)
            with tracing.server_span("POST", PATH, Headers(scope=scope)) as span:
                try:
                    body = await _accept(scope, receive, services)
                except CodemojexError as exc:
                    span.set_attribute("http.response.status_code", exc.status)
                    raise
                span.set_attribute("http.response.status_code", 202)
        else:
            body = await _accept(scope, receive, services)
    except CodemojexError as exc:
        await error_response(exc)(scope, receive, send)
        return
    except BACKEND_ERRORS as exc:
        log.warning("backend unavailable: %s: %s", type(exc).__name__, exc)
        await unavailable_response()(scope, receive, send)
        return
    await send(
        {
            "type": "http.response.start",
            "status": 202,
            "headers": [_JSON, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _never(_scope: Scope, _receive: Receive, _send: Send) -> None:
    raise AssertionError("the guess route is served by submit_guess")  # pragma: no cover


# What the router would have matched: request metrics read its template from the scope.
ROUTE = Route(PATH, _never, methods=["POST"])


def is_guess(scope: Scope) -> bool:
    """Whether an HTTP request is ``POST /api/guesses`` (served by :func:`guess_stack`)."""
    return bool(scope["method"] == "POST" and scope["path"] == PATH)


def guess_stack(middleware: Sequence[Middleware]) -> ASGIApp:
    """:func:`submit_guess` inside the app's HTTP middleware (outermost first), built as
    Starlette builds its own stack: the same classes and options every request passes."""
    app: ASGIApp = submit_guess
    for cls, args, kwargs in reversed(middleware):
        app = cls(app, *args, **kwargs)
    return app
