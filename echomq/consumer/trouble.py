"""``Trouble``: a loop's errors logged once per kind until it recovers, not a hundred
times a second."""

from __future__ import annotations

import logging

from redis.exceptions import ResponseError

from ..errors import TRANSIENT

log = logging.getLogger("echomq.consumer")


def kind(exc: BaseException) -> str:
    """What makes two errors "the same": the type, and for a server error its code
    (``OOM``, ``READONLY``, ``NOSCRIPT`` …)."""
    if isinstance(exc, ResponseError) and str(exc):
        return f"{type(exc).__name__} {str(exc).split()[0]}"
    return type(exc).__name__


class Trouble:
    def __init__(self, where: str) -> None:
        self.where = where
        self.seen: set[str] = set()

    def note(self, exc: BaseException) -> None:
        what = kind(exc)
        if what in self.seen:
            log.debug("%s failed again (%s)", self.where, exc)
            return
        self.seen.add(what)
        # A server or connection error says all there is; anything else is a bug: trace it.
        log.warning(
            "%s failed (%s: %s); retrying",
            self.where,
            type(exc).__name__,
            exc,
            exc_info=None if isinstance(exc, (*TRANSIENT, ResponseError)) else exc,
        )

    def ok(self) -> None:
        if self.seen:
            log.info("%s recovered", self.where)
            self.seen.clear()
