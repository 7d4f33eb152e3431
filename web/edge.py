"""The one wrapper every HTTP request passes (:class:`Edge`): security headers, a deadline,
and no 500, ever."""

from __future__ import annotations

import logging

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.deadlines import Deadlines
from web.errors import REQUEST_TIMEOUT_S, RequestTimeout, error_response, unavailable_response

log = logging.getLogger("codemojex.web")

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
