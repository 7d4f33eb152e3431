"""Errors at the edge: the contract's error answers, mapped in one place and rendered the
same way over HTTP and over the socket.

Every error leaves as ``{"error": code, "detail": text}``. The game's errors carry their own
code and status (:mod:`codemojex.errors`); this module adds the few only the edge can
raise (413, 405, 408, 403, unknown paths, the door's 503 overloaded) and turns everything
else — a backend that is down, a timeout, a bug — into ``503 unavailable`` with
``Retry-After``, never a 500 or a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from codemojex.errors import CodemojexError, InvalidBody, Unavailable
from web.responses import JSONResponse

log = logging.getLogger("codemojex.web")

MAX_BODY_BYTES = 16 * 1024
RETRY_AFTER_S = 1
# Every request's backend work, and every socket guess's, must finish within this, so a hung
# Valkey or SQL server turns into a prompt 503 (a 1013 close, an unavailable frame) instead
# of an answer that never comes.
REQUEST_TIMEOUT_S = 5.0

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
