"""Whose pages may write: a request's ``Origin`` against the server's own and the allowed."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import Scope

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def origin_allowed(headers: Headers, allowed: tuple[str, ...]) -> bool:
    """Whether a request's ``Origin`` is the server's own (its ``Host``) or on ``allowed``;
    a request without one (not a browser: Origin is a browser's promise) is allowed."""
    origin = headers.get("origin")
    if origin is None:
        return True
    origin = origin.strip().rstrip("/").lower()
    if origin in {a.strip().rstrip("/").lower() for a in allowed}:
        return True
    host = (headers.get("host") or "").strip().lower()
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc == host


def cross_site_simple(scope: Scope, allowed: tuple[str, ...]) -> bool:
    """A state-changing request a foreign page could send without a CORS preflight: its
    ``Origin`` is foreign and its body is not declared JSON (a browser preflights an
    ``application/json`` body, and this server answers no preflight)."""
    if scope["method"] not in STATE_CHANGING:
        return False
    # Most writes carry no Origin (not a browser) or a JSON body: one pass over the raw
    # headers decides those without building a Headers.
    origin = media = None
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value
        elif name == b"content-type":
            media = value
    if origin is None or media is not None and _is_json(media):
        return False
    return not origin_allowed(Headers(scope=scope), allowed)


def _is_json(content_type: bytes) -> bool:
    return content_type.partition(b";")[0].strip().lower() == b"application/json"
