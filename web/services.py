"""What every route of one web process shares: the game, the hub, the replays, the metrics,
the admin token — and the one path a guess takes in, whether it came over HTTP or the socket."""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection
from starlette.types import Scope

from codemojex import store
from codemojex.config import Config
from codemojex.errors import CodemojexError, Unauthorized
from codemojex.game import Game
from codemojex.guesses import Accepted
from web.door.gate import Gate
from web.errors import BACKEND_ERRORS
from web.hub import Hub
from web.metrics import Metrics
from web.replay import Replays

# A token that failed to authenticate is refused without a lookup for this long: a client
# that retries a bad token in a loop (or opens sockets with one) costs a hash, not a query.
# Short, and bounded: a flood of distinct made-up tokens only cycles the oldest out.
BAD_TOKEN_TTL_S = 5.0
BAD_TOKENS_KEPT = 4096


class BadTokens:
    """Hashes of tokens that failed lately, each for ``ttl_s``; at most ``kept`` of them
    (the oldest go first)."""

    def __init__(
        self,
        ttl_s: float = BAD_TOKEN_TTL_S,
        kept: int = BAD_TOKENS_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.kept = kept
        self.clock = clock
        self._until: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def __contains__(self, token: str) -> bool:
        key = store.hash_token(token)
        until = self._until.get(key)
        if until is None:
            return False
        if until <= self.clock():
            del self._until[key]
            return False
        return True

    def add(self, token: str) -> None:
        key = store.hash_token(token)
        self._until.pop(key, None)
        self._until[key] = self.clock() + self.ttl_s
        while len(self._until) > self.kept:
            self._until.popitem(last=False)


@dataclass(slots=True)
class Services:
    config: Config
    game: Game
    hub: Hub
    metrics: Metrics
    admin_token: str
    replays: Replays
    door: Gate | None = None  # the door's gate: a socket's guesses go through it too
    bad_tokens: BadTokens = field(default_factory=BadTokens)

    async def player(self, token: str | None) -> store.Player:
        """The player owning ``token``, else :class:`Unauthorized` (401); a token that
        failed lately fails again without a lookup (:class:`BadTokens`)."""
        if token and token in self.bad_tokens:
            raise Unauthorized("a valid player token is required")
        try:
            return await self.game.authenticate(token)
        except Unauthorized:
            if token:
                self.bad_tokens.add(token)
            raise

    def check_admin(self, token: str | None) -> None:
        """The admin token or 401; compared in constant time (a player's token is no key)."""
        if not token or not hmac.compare_digest(
            token.encode("utf-8", "surrogateescape"),
            self.admin_token.encode("utf-8", "surrogateescape"),
        ):
            raise Unauthorized("the admin token is required")

    async def accept_guess(
        self, player_id: str, round_id: str, guess: object, idempotency_key: str | None
    ) -> Accepted:
        """Submit one guess, count its outcome and tell the hub (progress) if it is new."""
        try:
            accepted = await self.game.submit(player_id, round_id, guess, idempotency_key)
        except CodemojexError as exc:
            self.count(exc.code)
            raise
        except BACKEND_ERRORS:
            self.count("unavailable")
            raise
        self.count("accepted" if accepted.created else "replayed")
        if accepted.created:
            self.hub.progress.accepted(round_id, player_id, accepted.seq)
        return accepted

    def refused_locally(self, token: str) -> bool:
        """Whether a guess with ``token`` will be refused for its player's rate without a
        Valkey round trip (a player this process knows, whom the bucket mirror refuses);
        the door lets such a guess skip its queue. No I/O."""
        player = self.game.known_player(token)
        return player is not None and self.game.guesses.mirror.wait_s(player.player_id) > 0

    def count(self, outcome: str) -> None:
        self.metrics.submissions.labels(outcome).inc()


def guess_refused_locally(scope: Scope, token: str) -> bool:
    """The door's peek (``web.door.middleware.Door``): a ``POST /api/guesses`` that
    :meth:`Services.refused_locally` says will be refused without Valkey."""
    if scope["path"] != "/api/guesses":
        return False
    services = getattr(scope["app"].state, "services", None)
    return isinstance(services, Services) and services.refused_locally(token)


def token_known(scope: Scope, token: str) -> bool:
    """The door's ``known`` (``web.door.middleware.Door``): ``token`` is one this process has
    authenticated lately. No I/O."""
    services = getattr(scope["app"].state, "services", None)
    return isinstance(services, Services) and services.game.known_player(token) is not None


def services_of(conn: HTTPConnection) -> Services:
    services = conn.app.state.services
    assert isinstance(services, Services)
    return services
