"""Argument checks, before anything is sent: the scripts rely on them (``attempts=1.0``
would be stored as ``"1.0"``, which ``HINCRBY`` refuses half-way through a claim)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Headers come back with every claim: small on purpose (a traceparent is 55 bytes).
MAX_HEADERS = 16
MAX_HEADERS_BYTES = 4096

# A row at this default has no `max` field (7 bytes that can move a small row down a
# jemalloc size class); lua/include/common.lua holds the same number.
DEFAULT_MAX_ATTEMPTS = 5


# The largest integer sent to a script: Lua doubles are exact to 2^53 and the scripts add
# to what they receive (now + a duration, HINCRBY), so 2^50 keeps every sum exact.
MAX_INT = 2**50
# A fencing token's one bound on every side (common.lua MAX_TOKEN): a claim hands out at
# most this, so an enqueue seeds `attempts` below it and a token past it is merely stale.
MAX_TOKEN = MAX_INT


def integer(name: str, value: Any, *, at_least: int | None = None, at_most: int = MAX_INT) -> int:
    """An ``int`` (never a ``bool``) in ``[at_least, at_most]``."""
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
    """A fencing token as the plain int the scripts compare; one no claim returned (a
    negative one) is merely stale."""
    return int(integer("token", value, at_least=-MAX_TOKEN, at_most=MAX_TOKEN))


def token_in_range(value: Any) -> int | None:
    """:func:`token` for one item of a batch call: None (that item stale) when out of range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"token must be an int, got {type(value).__name__}")
    return int(value) if -MAX_TOKEN <= value <= MAX_TOKEN else None


def attempts(value: Any) -> int:
    """An enqueue's ``attempts`` seed, below :data:`MAX_TOKEN` (its claim adds one)."""
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
    """Job headers: None (also for an empty mapping), or non-empty ``str`` -> ``str``, at
    most :data:`MAX_HEADERS` of them and :data:`MAX_HEADERS_BYTES` of UTF-8."""
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
