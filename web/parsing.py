"""What a request carries, read and checked: its body under the 16 KiB cap (the declared
``Content-Length`` and the bytes actually read), decoded with orjson, which refuses invalid
UTF-8 and lone surrogates (both ``invalid_body``); a guess's fields, an
``Idempotency-Key``, a bearer token."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from codemojex.errors import InvalidBody
from web.errors import MAX_BODY_BYTES, BodyTooLarge

MAX_IDEMPOTENCY_KEY_CHARS = 128


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refusing with 413 as soon as the declared or the actual size passes
    ``limit`` (a client may lie in Content-Length, or send chunks without one)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """Decode a JSON object; anything else (bad JSON, lone surrogates, a list) is 400."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidBody("the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidBody("the body must be a JSON object")
    return value


async def read_json_object(request: Request) -> dict[str, Any]:
    return parse_json_object(await read_body(request))


def guess_fields(body: dict[str, Any]) -> tuple[str, object]:
    """``round_id`` and the raw ``guess`` of a guess body. The guess itself is judged by the
    game (its errors are ``invalid_guess``); a missing field or a non-string id is a
    malformed body."""
    round_id = body.get("round_id")
    if not isinstance(round_id, str) or not round_id:
        raise InvalidBody("round_id must be a non-empty string")
    if "guess" not in body:
        raise InvalidBody("guess is required")
    return round_id, body["guess"]


def idempotency_key(value: str | None) -> str | None:
    """A usable ``Idempotency-Key`` (1–128 printable ASCII characters), or None if absent."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_IDEMPOTENCY_KEY_CHARS or not all(" " < ch <= "~" for ch in value):
        raise InvalidBody(
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII characters"
        )
    return value


def bearer_token(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None
