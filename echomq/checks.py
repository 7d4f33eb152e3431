"""Argument checks for the public API, run before anything is sent.

A wrong type raises ``TypeError`` and a value out of range ``ValueError``, so a bad call
changes nothing in Valkey. The scripts rely on it: ``attempts=1.0`` accepted here would
be stored as ``"1.0"``, which ``HINCRBY`` refuses half-way through a claim.
"""

from __future__ import annotations

from typing import Any


def integer(name: str, value: Any, *, at_least: int | None = None) -> int:
    """An ``int`` (never a ``bool`` or a ``float``) no smaller than ``at_least``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if at_least is not None and value < at_least:
        raise ValueError(f"{name} must be >= {at_least}, got {value}")
    return value


def optional_integer(name: str, value: Any, *, at_least: int | None = None) -> int | None:
    return None if value is None else integer(name, value, at_least=at_least)


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
    """A fencing token: an ``int``. One no claim ever returned (a negative one) is merely
    stale, as the contract answers any token that is not current."""
    return integer("token", value)


def bytes_(what: str, value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    return value
