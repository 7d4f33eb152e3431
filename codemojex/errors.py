"""The game's error tree.

Every error carries the contract's error ``code`` and its HTTP ``status`` as class
attributes, so the web layer maps the whole tree in one place::

    except CodemojexError as exc:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

``detail`` is the human-readable text that goes out as ``"detail"``; it never echoes raw
client input (which may be huge or not encodable), only describes what was wrong with it.
"""

from __future__ import annotations

import math
from typing import ClassVar

__all__ = [
    "CodemojexError",
    "Conflict",
    "IdempotencyConflict",
    "InvalidBody",
    "InvalidGuess",
    "InvalidName",
    "JobNotFound",
    "LaneFull",
    "NotYourGuess",
    "RateLimited",
    "RoundClosed",
    "RoundNotFound",
    "Unauthorized",
    "Unavailable",
    "retry_after_s",
]


class CodemojexError(Exception):
    """Base of every game error: ``code`` (contract error code), ``status`` (HTTP)."""

    code: ClassVar[str] = "unavailable"
    status: ClassVar[int] = 503
    default_detail: ClassVar[str] = "the game could not serve this request"

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail if detail is not None else self.default_detail
        super().__init__(self.detail)

    def body(self) -> dict[str, str]:
        """The contract's error body: ``{"error": code, "detail": text}``."""
        return {"error": self.code, "detail": self.detail}

    def headers(self) -> dict[str, str]:
        """Extra HTTP headers the answer must carry (``Retry-After`` for 429/503)."""
        return {}


class _RetryAfter(CodemojexError):
    """An error after which the client should come back later (``Retry-After``)."""

    def __init__(self, detail: str | None = None, *, retry_after_s: int = 1) -> None:
        # Whole seconds, at least 1: Retry-After has no fractions and 0 invites a hot loop.
        self.retry_after_s = max(1, int(retry_after_s))
        super().__init__(detail)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class InvalidBody(CodemojexError):
    """The request body is malformed (not JSON, wrong shape, bad field)."""

    code = "invalid_body"
    status = 400
    default_detail = "the request body is malformed"


class InvalidName(InvalidBody):
    """A player name outside the contract: 1–32 characters, no control or format ones."""

    default_detail = "name must be 1-32 characters with no control or format characters"


class InvalidGuess(CodemojexError):
    """A guess that is not exactly ``length`` palette emojis."""

    code = "invalid_guess"
    status = 400
    default_detail = "guess is not a list of palette emojis of the round's length"


class RoundNotFound(CodemojexError):
    code = "not_found"
    status = 404
    default_detail = "no such round"


class JobNotFound(CodemojexError):
    code = "not_found"
    status = 404
    default_detail = "no such guess"


class RoundClosed(CodemojexError):
    """The guess arrived at or after the round's ``closes_at`` (server clock)."""

    code = "round_closed"
    status = 409
    default_detail = "the round is closed"


class IdempotencyConflict(CodemojexError):
    """An ``Idempotency-Key`` reused with a different body."""

    code = "idempotency_conflict"
    status = 409
    default_detail = "this Idempotency-Key was used with a different body"


class Conflict(CodemojexError):
    """The target is not in a state that allows the action (a dead worker, a retried job)."""

    code = "conflict"
    status = 409
    default_detail = "the request conflicts with the current state"


class NotYourGuess(CodemojexError):
    code = "forbidden"
    status = 403
    default_detail = "this guess belongs to another player"


class Unauthorized(CodemojexError):
    code = "unauthorized"
    status = 401
    default_detail = "missing or invalid bearer token"


class _Throttled(_RetryAfter):
    """A 429: the wait comes first, as the refusing code always knows it."""

    def __init__(self, retry_after_s: int = 1, detail: str | None = None) -> None:
        super().__init__(detail, retry_after_s=retry_after_s)


class LaneFull(_Throttled):
    """The player already has the cap of guesses pending (accepted, not yet scored)."""

    code = "lane_full"
    status = 429
    default_detail = "too many guesses pending; wait for some to be scored"


def retry_after_s(wait_ms: int) -> int:
    """A wait in milliseconds as ``Retry-After``: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_ms / 1000))


class RateLimited(_Throttled):
    """The player submits faster than the per-player rate (a token bucket on the server
    clock); nothing was accepted and no ``seq`` taken."""

    code = "rate_limited"
    status = 429
    default_detail = "too many guesses too fast; slow down"


class Unavailable(_RetryAfter):
    """Valkey or SQL is down; the client should retry."""

    code = "unavailable"
    status = 503
    default_detail = "the game is temporarily unavailable"
