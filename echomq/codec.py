"""JSON via orjson (fast, strict UTF-8) and the byte/str coercions of raw replies."""

from __future__ import annotations

from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """JSON bytes; ``TypeError`` for what JSON cannot carry."""
    return orjson.dumps(value)


def loads(raw: bytes | str | None) -> Any:
    if raw is None or raw == b"" or raw == "":
        return None
    return orjson.loads(raw)


def text(raw: bytes | str | None) -> str:
    """A raw reply as ``str`` (``""`` for None), whether the client decodes or not."""
    if raw is None:
        return ""
    return raw.decode() if isinstance(raw, bytes) else raw


def number(raw: bytes | str | int | None, default: int = 0) -> int:
    if raw is None or raw == b"" or raw == "":
        return default
    return int(raw)
