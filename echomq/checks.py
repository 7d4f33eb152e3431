"""Argument checks for the public API, run before anything is sent.

A wrong type raises ``TypeError`` and a value out of range ``ValueError``, so a bad call
changes nothing in Valkey. The scripts rely on it: ``attempts=1.0`` accepted here would
be stored as ``"1.0"``, which ``HINCRBY`` refuses half-way through a claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A job's headers ride on its row and come back with every claim: small on purpose (a
# W3C traceparent is 55 bytes, a tracestate at most 512 by its own spec).
MAX_HEADERS = 16
MAX_HEADERS_BYTES = 4096

# Deliveries a job is allowed unless told otherwise. A row at this default has no `max`
# field (7 bytes of listpack, which under jemalloc is what takes a game's row from the
# 256-byte size class to 224): lua/include/common.lua DEFAULT_MAX_ATTEMPTS is the same.
DEFAULT_MAX_ATTEMPTS = 5


# The largest integer any call sends to a script. Lua numbers are doubles, exact up to
# 2^53 only, and the scripts add to what they receive: a claim HINCRBYs `attempts`, a lease
# or a due time is server now (~2^41 ms) + a duration, a PEXPIRE adds a ttl to the clock.
# 2^50 (35,000 years of milliseconds, a million billion deliveries) leaves every such sum
# exact, and far below 2^63 - 1, where HINCRBY refuses (an `attempts` of 2^63 - 1 once
# stopped a claim half-way). The scripts read any row count at or past 2^53 - 1 as
# malformed (common.lua `count`).
MAX_INT = 2**50

# The one bound of a fencing token (a row's `attempts` after a claim), on every side: a
# claim hands out at most this (lua/include/common.lua MAX_TOKEN: a row at it is not leased
# again), so an enqueue seeds `attempts` below it (the claim adds one) and a token past it
# can never be current, in a batch call merely stale.
MAX_TOKEN = MAX_INT


def integer(name: str, value: Any, *, at_least: int | None = None, at_most: int = MAX_INT) -> int:
    """An ``int`` (never a ``bool`` or a ``float``) no smaller than ``at_least`` and no
    larger than ``at_most`` (:data:`MAX_INT`: what the scripts hold exactly)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if at_least is not None and value < at_least:
        raise ValueError(f"{name} must be >= {at_least}, got {value}")
    if value > at_most:
        raise ValueError(f"{name} must be <= {at_most}, got {value}")
    return value


def optional_integer(
    name: str, value: Any, *, at_least: int | None = None, at_most: int = MAX_INT
) -> int | None:
    return None if value is None else integer(name, value, at_least=at_least, at_most=at_most)


def name(what: str, value: Any) -> str:
    """A non-empty ``str`` (a job id, worker id, lane)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    return value


def optional_name(what: str, value: Any) -> str | None:
    return None if value is None else name(what, value)


def string(what: str, value: Any) -> str:
    """Any ``str``, the empty one included (an error text)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    return value


def token(value: Any) -> int:
    """A fencing token: an ``int`` (a claim's :class:`echomq.types.Token`, or a bare int:
    then state and attempts are checked, not the lease). One no claim ever returned (a
    negative one) is merely stale, as the contract answers any token that is not current.
    Returned as a plain int, the number the scripts compare."""
    return int(integer("token", value, at_least=-MAX_TOKEN, at_most=MAX_TOKEN))


def token_in_range(value: Any) -> int | None:
    """:func:`token` for one item of a batch call: None for an int out of range (no claim
    hands such a token out: that item is stale, and the others go on); ``TypeError`` for
    anything but an int."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token must be an int, got {type(value).__name__}")
    return int(value) if -MAX_TOKEN <= value <= MAX_TOKEN else None


def attempts(value: Any) -> int:
    """An enqueue's ``attempts`` seed: the claim makes it ``attempts + 1``, which must be a
    token a claim can hand out (at most :data:`MAX_TOKEN`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"attempts must be an int, got {type(value).__name__}")
    if not 0 <= value < MAX_TOKEN:
        raise ValueError(
            f"attempts must be >= 0 and < {MAX_TOKEN} (its claim's token, attempts + 1,"
            f" is at most {MAX_TOKEN}), got {value}"
        )
    return value


def bytes_(what: str, value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    return value


def headers(value: Any) -> dict[str, str] | None:
    """Job headers: None, or a mapping of non-empty ``str`` keys to ``str`` values, at most
    :data:`MAX_HEADERS` of them and :data:`MAX_HEADERS_BYTES` of UTF-8 in all. An empty
    mapping is None: nothing is stored."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"headers must be a mapping of str to str, got {type(value).__name__}")
    if len(value) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers, got {len(value)}")
    out: dict[str, str] = {}
    size = 0
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(
                f"headers must map str to str, got {type(key).__name__} -> {type(item).__name__}"
            )
        if not key:
            raise ValueError("a header name must not be empty")
        try:
            size += len(key.encode()) + len(item.encode())
        except UnicodeEncodeError:
            raise ValueError("headers must be valid Unicode text (no lone surrogates)") from None
        out[key] = item
    if size > MAX_HEADERS_BYTES:
        raise ValueError(f"headers hold {size} bytes, at most {MAX_HEADERS_BYTES}")
    return out or None
