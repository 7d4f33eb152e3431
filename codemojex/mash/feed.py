"""One player's websocket, kept open for the whole run, resumed after any drop.

The feed hands ``score`` messages to the ledger (which dedupes by job id) and ``round``
messages to the field. After a drop it reconnects with ``after=`` the last event id it saw,
so the server replays what was missed; a ``gap`` (events already trimmed) is noted for the
verdict. Before any score has arrived there is no event id to resume from; the player's own
id stands in, because event ids are stream ids on the server clock and none of a player's
scores can precede its creation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import quote

import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from codemojex.mash.ledger import Ledger
from codemojex.mash.players import Field, Player
from echomq.backoff import Backoff
from echomq.ids import ulid_time_ms

log = logging.getLogger("codemojex.mash.feed")

OPEN_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # progress and leaderboard grow with the field
BACKOFF_S = (0.1, 2.0)
CLOCK_MARGIN_MS = 1_000  # the id may be minted on a web server whose clock lags Valkey's


class Feed:
    def __init__(self, ws_url: str, player: Player, ledger: Ledger, field: Field) -> None:
        self.ws_url = ws_url
        self.player = player
        self.ledger = ledger
        self.field = field
        self.ready = asyncio.Event()  # the first greeting arrived: scores from now on reach us
        self.last_event_id: str | None = None
        self.connects = 0
        self.messages = 0

    def _url(self) -> str:
        url = f"{self.ws_url}?token={quote(self.player.token)}"
        after = self.last_event_id
        if after is None and self.connects:
            with contextlib.suppress(ValueError):
                after = f"{ulid_time_ms(self.player.player_id) - CLOCK_MARGIN_MS}-0"
        return url if after is None else f"{url}&after={quote(after)}"

    def _source(self) -> dict[str, Any]:
        return {"local_addr": (self.player.source, 0)} if self.player.source else {}

    async def run(self) -> None:
        """Follow the socket until cancelled, reconnecting with back-off."""
        backoff = Backoff(*BACKOFF_S)  # jittered: a field of sockets does not return in step
        while True:
            try:
                async with connect(
                    self._url(),
                    open_timeout=OPEN_TIMEOUT_S,
                    close_timeout=CLOSE_TIMEOUT_S,
                    max_size=MAX_MESSAGE_BYTES,
                    compression=None,
                    # a masher's socket comes from its own address, as its requests do
                    **self._source(),
                ) as ws:
                    self.connects += 1
                    backoff.reset()
                    async for raw in ws:
                        self._on(raw)
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake, InvalidURI) as exc:
                log.debug("socket of %s: %s: %s", self.player.name, type(exc).__name__, exc)
            await backoff.sleep()

    def _on(self, raw: str | bytes) -> None:
        self.messages += 1
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        kind = msg.get("type") if isinstance(msg, dict) else None
        if kind == "score":
            self.ledger.deliver(msg)
            if isinstance(msg.get("event_id"), str):
                self.last_event_id = msg["event_id"]
        elif kind == "round":
            self.field.observe(msg)
            self.ready.set()
        elif kind == "gap":
            self.ledger.gaps.add(self.player.player_id)
