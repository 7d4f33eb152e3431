"""Errors at the edge: the contract's error answers, mapped in one place, and body parsing.

Every error leaves as ``{"error": code, "detail": text}``. The game's errors carry their own
code and status (:mod:`codemojex.errors`); this module adds the few only the edge can
raise (413, 405, unknown paths) and turns everything else — a backend that is down, a
timeout, a bug — into ``503 unavailable`` with ``Retry-After``, never a 500 or a traceback.

Parsing helpers read a request body under the 16 KiB cap (the declared ``Content-Length``
and the bytes actually read) and decode it with orjson, which refuses invalid UTF-8 and
lone surrogates: both are ``invalid_body``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codemojex.errors import CodemojexError, InvalidBody, Unavailable
from web.deadlines import Deadlines
from web.responses import JSONResponse

log = logging.getLogger("codemojex.web")

MAX_BODY_BYTES = 16 * 1024
# Every request's backend work must finish within this, so a hung Valkey or SQL server
# turns into a prompt 503 instead of a request that never answers.
REQUEST_TIMEOUT_S = 5.0
RETRY_AFTER_S = 1
MAX_IDEMPOTENCY_KEY_CHARS = 128

# What "the backend is down" looks like from here: redis' ConnectionError/TimeoutError (and
# the rest of its tree), SQLAlchemy's OperationalError/DBAPIError, raw sockets, timeouts.
BACKEND_ERRORS: tuple[type[Exception], ...] = (
    RedisError,
    SQLAlchemyError,
    OSError,
    asyncio.TimeoutError,
)


class BodyTooLarge(CodemojexError):
    code = "body_too_large"
    status = 413
    default_detail = f"the body exceeds {MAX_BODY_BYTES} bytes"


class MethodNotAllowed(CodemojexError):
    code = "method_not_allowed"
    status = 405
    default_detail = "this method is not allowed on this path"


class RequestTimeout(CodemojexError):
    code = "request_timeout"
    status = 408
    default_detail = "the request body did not arrive in time"

    def headers(self) -> dict[str, str]:
        # The rest of the body may still be on its way: this connection is done.
        return {"Connection": "close"}


class ForeignOrigin(CodemojexError):
    code = "forbidden"
    status = 403
    default_detail = (
        "a request that changes state from another site's page must send an application/json body"
    )


class NotFound(CodemojexError):
    code = "not_found"
    status = 404
    default_detail = "no such resource"


class Overloaded(Unavailable):
    """Shed at the door: this server is busy, not its backend down."""

    code = "overloaded"


# -- rendering: the same error over HTTP and as the socket's error frame ----------------------


def error_response(exc: CodemojexError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


def prebuilt_response(exc: CodemojexError) -> tuple[Message, Message]:
    """``exc``'s HTTP answer as the two ASGI messages, built once for an answer sent often
    (the door's refusals), where a response object per answer would cost the hot path."""
    body = orjson.dumps(exc.body())
    start: Message = {
        "type": "http.response.start",
        "status": exc.status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in exc.headers().items()),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


def error_frame(exc: CodemojexError, client_id: str | None) -> dict[str, Any]:
    """``exc`` as the socket's ``error`` message: the HTTP body's fields, its
    ``Retry-After`` as ``retry_after``."""
    out: dict[str, Any] = {"type": "error", "client_id": client_id, **exc.body()}
    retry = exc.headers().get("Retry-After")
    if retry is not None:
        out["retry_after"] = int(retry)
    return out


def unavailable_response(detail: str | None = None) -> JSONResponse:
    return error_response(Unavailable(detail, retry_after_s=RETRY_AFTER_S))


# -- exception handlers (registered once, in app.py) ------------------------------------------


async def on_game_error(_request: Request, exc: Exception) -> Response:
    """Every :class:`CodemojexError` subclass, game or edge, answered the same way."""
    assert isinstance(exc, CodemojexError)
    return error_response(exc)


async def on_http_error(_request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (route, wrong method), in the contract's shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        resp = error_response(MethodNotAllowed())
        if exc.headers and "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    if exc.status_code == 404:
        return error_response(NotFound())
    if exc.status_code == 413:
        return error_response(BodyTooLarge())
    if 400 <= exc.status_code < 500:
        return error_response(InvalidBody("the request is malformed"))
    return unavailable_response()


async def on_backend_error(_request: Request, exc: Exception) -> Response:
    log.warning("backend unavailable: %s: %s", type(exc).__name__, exc)
    return unavailable_response()


SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
_NO_STORE = (b"cache-control", b"no-store")


def _with_security_headers(
    headers: list[tuple[bytes, bytes]], api: bool
) -> list[tuple[bytes, bytes]]:
    present = {name.lower() for name, _ in headers}
    out = headers + [h for h in SECURITY_HEADERS if h[0] not in present]
    if api and b"cache-control" not in present:
        out.append(_NO_STORE)
    return out


class Edge:
    """The one wrapper every HTTP request passes: security headers on every answer, errors
    included (API answers also ``no-store``: they carry tokens and live state), a deadline
    on every request, and no 500, ever. One wrapper rather than two, since each costs a
    closure and an await per message on the hot path.

    Runs inside Starlette's ServerErrorMiddleware and outside the exception handlers, so it
    sees only what they did not map: the request deadline expiring (the cancellation
    surfaces here as TimeoutError) and bugs. A deadline that expires while the app waits
    for the body is the client's slowness: ``408 request_timeout``; any other expiry is the
    backend's: ``503 unavailable``; bugs answer 503 too and are logged with their
    traceback, which never reaches the client. A client that leaves mid-body gets nothing
    (there is nobody to answer) and costs one log line.
    """

    def __init__(self, app: ASGIApp, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.deadlines = Deadlines(timeout_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        api = scope["path"].startswith("/api/")
        awaiting_body = False

        async def receive_tracked() -> Message:
            nonlocal awaiting_body
            awaiting_body = True  # stays set if the deadline cancels the wait
            message = await receive()
            awaiting_body = False
            return message

        async def send_tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {
                    **message,
                    "headers": _with_security_headers(list(message.get("headers", [])), api),
                }
            await send(message)

        try:
            async with self.deadlines.within():
                await self.app(scope, receive_tracked, send_tracked)
        except Exception as exc:
            if started:
                raise  # half an answer is out; nothing better to do than drop the connection
            if isinstance(exc, ClientDisconnect):
                log.info("client left before its request was read: %s", scope["path"])
                return
            if isinstance(exc, TimeoutError) and awaiting_body:
                log.info("request body too slow: %s", scope["path"])
                await error_response(RequestTimeout())(scope, receive, send_tracked)
                return
            if isinstance(exc, TimeoutError):
                log.warning("request timed out after %.1fs: %s", self.timeout_s, scope["path"])
            else:
                log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            await unavailable_response()(scope, receive, send_tracked)


# -- body parsing ---------------------------------------------------------------------------------


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refusing with 413 as soon as the declared or the actual size passes
    ``limit`` (a client may lie in Content-Length, or send chunks without one)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """Decode a JSON object; anything else (bad JSON, lone surrogates, a list) is 400."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidBody("the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidBody("the body must be a JSON object")
    return value


async def read_json_object(request: Request) -> dict[str, Any]:
    return parse_json_object(await read_body(request))


def guess_fields(body: dict[str, Any]) -> tuple[str, object]:
    """``round_id`` and the raw ``guess`` of a guess body. The guess itself is judged by the
    game (its errors are ``invalid_guess``); a missing field or a non-string id is a
    malformed body."""
    round_id = body.get("round_id")
    if not isinstance(round_id, str) or not round_id:
        raise InvalidBody("round_id must be a non-empty string")
    if "guess" not in body:
        raise InvalidBody("guess is required")
    return round_id, body["guess"]


def idempotency_key(value: str | None) -> str | None:
    """A usable ``Idempotency-Key`` (1–128 printable ASCII characters), or None if absent."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY_CHARS or not all(" " < ch <= "~" for ch in value):
        raise InvalidBody(
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII characters"
        )
    return value


def bearer_token(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None
