"""``GET /ws?token=…[&after=<event_id>]``: one player's live socket (docs/contract.md §4). The
token may instead come as the subprotocol ``codemojex.token.<token>`` offered beside
``codemojex`` (what the page does, so no URL carries it: :func:`offered_token`).

Admission happens before the upgrade: an ``Origin`` that is neither the server's own (the
request's ``Host``) nor on ``config.allowed_origins`` is refused with HTTP 403, and so is a
bad token; a missing ``Origin`` (a non-browser client) is let in. Then, in this order: the
current ``round``, the ``leaderboard``, the replay (with ``after=``: a ``gap`` first if
events after it were trimmed, then this player's retained scores after it), the field's
progress so far, and the live feed from the hub.

One task serves a socket, the one uvicorn runs the app in: it greets, then reads the
client's frames and answers its ``guess`` frames. Everything the socket is sent goes out as
whole frames through the server's ``codemojex.frames`` extension (:mod:`web.frames`), the
hub's broadcasts included, so a socket costs no pump task and no queue: an idle one is its
uvicorn protocol, this task and the hub's small :class:`~web.outbox.Connection`. A socket
whose unsent bytes pile up is closed with 4008 by the hub. Malformed frames get an
``error`` message; binary frames close with 1003, oversize ones with 1009; server trouble
closes with 1013 — never 1011.

What a socket costs before it is a socket is bounded too: its handshake (the origin check
and the token's lookup) holds one of its address's requests at the door
(:meth:`web.door.gate.Gate.address_slot`; past the bound it is closed 1013), and a token that
failed lately is refused without a lookup (:class:`web.services.BadTokens`). Frames that are
no guess (pings, malformed ones) cost a reply each, so a socket may send only
:data:`FRAME_RATE_PER_S` of them a second (bursts of :data:`FRAME_BURST`); past that it is
closed 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from starlette import status
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from codemojex import store
from codemojex.admission import address_key
from codemojex.errors import CodemojexError, InvalidBody, Unauthorized, Unavailable
from codemojex.guesses import Accepted
from web.deadlines import Deadlines
from web.door.admit import Shed, through
from web.door.origin import origin_allowed
from web.errors import (
    BACKEND_ERRORS,
    MAX_BODY_BYTES,
    REQUEST_TIMEOUT_S,
    RETRY_AFTER_S,
    NotFound,
    error_frame,
)
from web.frames import CLOSE_TIMEOUT_S, CLOSE_TRY_AGAIN_LATER, EXTENSION, FrameSink
from web.intake import read_guess
from web.messages import parse_event_id
from web.outbox import Connection, Outgoing
from web.parsing import idempotency_key, parse_json_object
from web.services import Services, services_of

log = logging.getLogger("codemojex.web.ws")

CLOSE_UNSUPPORTED_DATA = status.WS_1003_UNSUPPORTED_DATA  # binary frames
CLOSE_TOO_BIG = status.WS_1009_MESSAGE_TOO_BIG
CLOSE_POLICY = status.WS_1008_POLICY_VIOLATION  # past its rate of frames that are no guess

# Frames that are no guess (pings, malformed ones) a socket may send: a page sends none of
# its own accord, so this is generous for any client that pings to keep a proxy awake and
# small beside what a loop of them costs (a parse and a reply each).
FRAME_RATE_PER_S = 2.0
FRAME_BURST = 20.0

# The socket's guesses each get REQUEST_TIMEOUT_S for their backend work (one shared timer).
_BACKEND_DEADLINES = Deadlines(REQUEST_TIMEOUT_S)
GREETING_TIMEOUT_S = 15.0  # the replay may page through a long stream
DRAIN_POLL_S = 0.01


class _Done(Exception):
    """The reader's way to end the socket with a close code (None: the client left)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


async def _refuse(websocket: WebSocket) -> None:
    """Refuse before the upgrade: a close before accept, which the server answers with
    HTTP 403. (Not a denial response with a JSON body: a browser cannot read it, and
    uvicorn's sansio protocol logs a spurious error after one.)"""
    await websocket.close()


SUBPROTOCOL = "codemojex"
TOKEN_SUBPROTOCOL_PREFIX = "codemojex.token."


def offered_token(websocket: WebSocket) -> tuple[str | None, str | None]:
    """The player's token and the subprotocol to answer with.

    A browser need not put its token in the URL (where proxies and servers log it): it
    may offer the subprotocols ``codemojex`` and ``codemojex.token.<token>`` instead
    (``new WebSocket(url, ["codemojex", "codemojex.token." + token])``); the server
    answers ``codemojex``, never echoing the token. Without them, ``?token=`` as in the
    contract. Both at once: the header's token wins, and a token offered without
    ``codemojex`` is no token (a browser fails a handshake whose answer names no
    subprotocol it offered)."""
    offered = [
        p.strip()
        for value in websocket.headers.getlist("sec-websocket-protocol")
        for p in value.split(",")
    ]
    tokens = [
        p[len(TOKEN_SUBPROTOCOL_PREFIX) :]
        for p in offered
        if p.startswith(TOKEN_SUBPROTOCOL_PREFIX)
    ]
    chosen = SUBPROTOCOL if SUBPROTOCOL in offered else None
    if tokens:
        return (tokens[0] if chosen else None), chosen
    return websocket.query_params.get("token"), chosen


async def socket_endpoint(websocket: WebSocket) -> None:
    services = services_of(websocket)
    address = address_key(websocket.client.host if websocket.client else None)
    token, subprotocol = offered_token(websocket)
    gate = services.door
    slot = gate.address_slot(address) if gate is not None else contextlib.nullcontext(True)
    with slot as room:
        if room:
            if not origin_allowed(websocket.headers, services.config.allowed_origins):
                await _refuse(websocket)
                return
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    player = await services.player(token)
            except Unauthorized:
                await _refuse(websocket)
                return
            except BACKEND_ERRORS as exc:
                # Not a 403: the token may be fine. Accept and close "try again later",
                # which the page answers by reconnecting with backoff.
                log.warning("socket closed, backend unavailable: %s: %s", type(exc).__name__, exc)
                room = False
    if not room:
        # Its address has too many requests at the door (or the backend failed): try
        # again later, which the page answers by reconnecting with backoff.
        await websocket.accept(subprotocol)
        await _close(websocket, CLOSE_TRY_AGAIN_LATER)
        return

    await websocket.accept(subprotocol)
    sink: FrameSink | None = websocket.scope.get("extensions", {}).get(EXTENSION)
    if sink is None:
        log.error("socket refused: the app is served without web.server's websocket protocol")
        await _close(websocket, CLOSE_TRY_AGAIN_LATER)
        return
    if not services.hub.admits(player.player_id, address):
        # Too many sockets (this player's, this address's or this process's): try again
        # later, as after a restart; the page backs off before reconnecting.
        await _close(websocket, CLOSE_TRY_AGAIN_LATER)
        return
    conn = services.hub.join(player.player_id, sink, address)
    try:
        code = await _session(websocket, services, player, conn, token or "")
    except WebSocketDisconnect:
        return
    except Exception as exc:  # never let the server answer 1011
        if isinstance(exc, BACKEND_ERRORS):
            log.warning("socket closed, backend unavailable: %s: %s", type(exc).__name__, exc)
        else:
            log.exception("socket of %s failed", player.player_id)
        code = CLOSE_TRY_AGAIN_LATER
    finally:
        services.hub.leave(conn)
    if code is not None:
        await _close(websocket, code)


async def _close(websocket: WebSocket, code: int) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await websocket.close(code)


async def _session(
    websocket: WebSocket, services: Services, player: store.Player, conn: Connection, token: str
) -> int | None:
    """Greet, then read until the client leaves or is closed; returns the close code to
    send (None: nothing more to send)."""
    async with asyncio.timeout(GREETING_TIMEOUT_S):
        await _greet(websocket, services, player, conn)
    conn.greeted()
    try:
        await _read(websocket, services, player, conn, token)
    except _Done as done:
        return None if conn.evicted else done.code
    return None


async def _greet(
    websocket: WebSocket, services: Services, player: store.Player, conn: Connection
) -> None:
    """Round, leaderboard, replay, progress — written ahead of what the hub offers the
    socket meanwhile, which waits in the connection until :meth:`Connection.greeted`."""
    info, now = await services.game.current_round()
    conn.send_now(Outgoing.of({"type": "round", **info.public(now)}))
    conn.send_now(Outgoing.of({"type": "leaderboard", "players": await services.hub.leaderboard()}))
    after = websocket.query_params.get("after")
    if after is not None:
        pos = parse_event_id(after)
        replay = None
        if pos is not None:
            replay = await services.replays.resume(
                player.player_id, conn.address, f"{pos[0]}-{pos[1]}"
            )
        # No usable id, a replay past its bound or its player's or address's allowance,
        # or trimmed events: the page refetches.
        if pos is None or replay is None or await services.replays.gap_after(player.player_id, pos):
            conn.send_now(Outgoing.of({"type": "gap"}))
        for item in replay or ():
            conn.send_now(item)
            await _drained(conn)
    mark = conn.waiting_mark()  # what the flusher queued before the snapshot is older
    progress = await services.hub.progress_snapshot(info.round_id)
    if progress is not None:
        conn.send_snapshot(progress, mark)


async def _drained(conn: Connection) -> None:
    """Let a slow reader take a long replay instead of evicting it for what the greeting
    itself wrote (the hub's frames wait in the connection until the greeting is done)."""
    while conn.sink.buffered() > conn.limit // 2 and not conn.evicted:
        await asyncio.sleep(DRAIN_POLL_S)


class _FrameAllowance:
    """One socket's token bucket for frames that are no guess (see the module docstring)."""

    __slots__ = ("at", "tokens")

    def __init__(self) -> None:
        self.tokens = FRAME_BURST
        self.at = time.monotonic()

    def spend(self) -> None:
        """One such frame; past the rate, the socket is closed with :data:`CLOSE_POLICY`."""
        now = time.monotonic()
        self.tokens = min(FRAME_BURST, self.tokens + (now - self.at) * FRAME_RATE_PER_S)
        self.at = now
        if self.tokens < 1:
            raise _Done(CLOSE_POLICY)
        self.tokens -= 1


async def _read(
    websocket: WebSocket, services: Services, player: store.Player, conn: Connection, token: str
) -> None:
    allowance = _FrameAllowance()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise _Done(None)
        if message.get("bytes") is not None:
            raise _Done(CLOSE_UNSUPPORTED_DATA)
        text = message.get("text")
        if text is None:
            continue
        if (
            len(text) > MAX_BODY_BYTES
            or len(text.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES
        ):
            raise _Done(CLOSE_TOO_BIG)
        reply = await _answer(text, services, player, token, conn.address, allowance)
        if reply is not None:
            services.hub.offer(conn, Outgoing.of(reply))


async def _answer(
    text: str,
    services: Services,
    player: store.Player,
    token: str,
    address: str,
    allowance: _FrameAllowance,
) -> dict[str, Any] | None:
    """The reply to one client frame (None: nothing to say).

    A guess goes through the same door as ``POST /api/guesses`` (:func:`web.door.admit.through`:
    weighed by its token's rate and its address's, lightest first, the heaviest shed), or
    a socket would be a way around it for a masher. Shed, it is answered with an
    ``overloaded`` error frame and ``retry_after``, no sooner than a second after it came:
    the socket's frames are read one at a time, so a client that resends at once only
    slows its own socket."""
    client_id: str | None = None
    try:
        try:
            body = parse_json_object(text)
            kind = body.get("type")
            if kind == "ping":
                allowance.spend()
                return {"type": "pong"}
            if kind != "guess":
                raise InvalidBody('type must be "guess"')
            raw_id = body.get("client_id")
            if raw_id is not None:
                client_id = idempotency_key(raw_id if isinstance(raw_id, str) else "")
            round_id, guess = read_guess(services, body)
        except InvalidBody:
            allowance.spend()
            raise

        async def submit() -> Accepted:
            async with _BACKEND_DEADLINES.within():
                # client_id doubles as the Idempotency-Key: a page that resends a guess over
                # HTTP after its socket dropped (same key) can never have it counted twice.
                return await services.accept_guess(player.player_id, round_id, guess, client_id)

        gate = services.door
        if gate is None:
            accepted = await submit()
        else:
            outcome = await through(
                gate,
                address,
                token,
                submit,
                now=gate.clock(),
                bypass=lambda: services.refused_locally(token),
                guess=True,
            )
            if isinstance(outcome, Shed):
                return error_frame(outcome.error, client_id)
            accepted = outcome
    except CodemojexError as exc:
        return error_frame(exc, client_id)
    except BACKEND_ERRORS as exc:
        log.warning("socket guess: backend unavailable: %s: %s", type(exc).__name__, exc)
        return error_frame(Unavailable(retry_after_s=RETRY_AFTER_S), client_id)
    return {
        "type": "accepted",
        "client_id": client_id,
        "job_id": accepted.job_id,
        "seq": accepted.seq,
    }


async def plain_http(_request: Request) -> Response:
    """``/ws`` asked without an upgrade: nothing to get here (404, as documented); any
    other method is 405 with ``Allow: GET``, as on every other path."""
    raise NotFound("/ws is a websocket: open it with an upgrade")


PATH = "/ws"
routes: list[BaseRoute] = [
    WebSocketRoute(PATH, socket_endpoint),  # reached only by an app without web.app.App
    Route(PATH, plain_http, methods=["GET"]),
]
