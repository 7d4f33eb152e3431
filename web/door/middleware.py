"""The door as ASGI middleware over a :class:`~web.door.gate.Gate`."""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from codemojex.admission import address_key
from web.door.admit import ADDRESS, Shed, hold_refusal, through
from web.door.body import BODY_TIMEOUT_S, BodyDeadlines, declared_length, replaying
from web.door.gate import Gate
from web.door.origin import cross_site_simple
from web.errors import MAX_BODY_BYTES, ForeignOrigin, RequestTimeout, error_response

log = logging.getLogger("codemojex.web")

MAX_TOKEN_BYTES = 300  # a longer Authorization header is no token (401): weighed by address

Peek = Callable[[Scope, str], bool]


def authorization(scope: Scope) -> str | None:
    """:func:`web.parsing.bearer_token` on the raw headers, written out: every API request
    pays for it before the door weighs it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            if len(value) > MAX_TOKEN_BYTES:
                return None
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


class Door:
    """ASGI middleware over a :class:`Gate` (see :mod:`web.door`). ``peek(scope,
    token)``: True for a guess that will be answered without backend work (the bucket
    mirror refuses its player): it skips the queue. ``known(scope, token)``: True for a
    token this process has authenticated (no I/O). ``allowed_origins``: the origins
    besides the server's own whose pages may write (``Config.allowed_origins``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        gate: Gate,
        peek: Peek | None = None,
        known: Peek | None = None,
        allowed_origins: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.gate = gate
        self.peek = peek
        self.known = known
        self.allowed_origins = allowed_origins
        self.deadlines = BodyDeadlines(BODY_TIMEOUT_S)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if cross_site_simple(scope, self.allowed_origins):
            await error_response(ForeignOrigin())(scope, receive, send)
            return
        gate = self.gate
        client = scope.get("client")
        address = address_key(client[0] if client else "")
        if not scope["path"].startswith("/api/"):
            # Pages, health, metrics: no queue, but one address holds only so many.
            with gate.address_slot(address) as room:
                if room:
                    await self.app(scope, receive, send)
                    return
            await hold_refusal(gate, gate.clock(), address)
            await self._answer(ADDRESS, send)
            return
        declared = declared_length(scope)
        if declared is None or declared <= MAX_BODY_BYTES:
            try:
                messages = await self.deadlines.read(receive)
            except TimeoutError:
                log.info("request body too slow: %s", scope["path"])
                gate.counts["body_timeout"] += 1
                await error_response(RequestTimeout())(scope, receive, send)
                return
            if messages is None:
                log.info("client left before its request was read: %s", scope["path"])
                return  # nobody to answer
            receive = replaying(messages, receive)
        now = gate.clock()
        token = authorization(scope)
        post = scope["method"] == "POST"
        peek = self.peek
        bypass = None
        if token is not None and peek is not None and post:

            def bypass() -> bool:
                return peek(scope, token)

        known = self.known
        shed = await through(
            gate,
            address,
            token,
            lambda: self.app(scope, receive, send),
            now=now,
            bypass=bypass,
            guess=post and scope["path"] == "/api/guesses",
            authenticated=token is not None and (known is None or known(scope, token)),
        )
        if isinstance(shed, Shed):
            await self._answer(shed, send)

    @staticmethod
    async def _answer(shed: Shed, send: Send) -> None:
        start, body = shed.answer
        await send({**start, "headers": list(start["headers"])})
        await send(body)
