"""``Trouble``: the errors of one consumer loop, logged once per kind until it recovers.

A loop that retries forever (claiming, beating, completing, reaping) would otherwise log
the same outage a hundred times a second; one line when it starts, one when it ends, and
the repeats at debug level say as much.
"""

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
    """The errors of one loop, logged once per kind until the loop succeeds again."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.seen: set[str] = set()

    def note(self, exc: BaseException) -> None:
        """Log ``exc`` if its kind is new since the last success (at debug level if not)."""
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
        """The loop succeeded: say so once if it had been failing, and forget the kinds."""
        if self.seen:
            log.info("%s recovered", self.where)
            self.seen.clear()
