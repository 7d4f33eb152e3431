"""Log lines for people (``text``, the default) or for machines (``json``: one object a line).

JSON lines carry ``ts`` (epoch seconds), ``level``, ``logger``, ``pid``, ``msg`` and, where
the code that logged knew them, ``job_id``, ``worker_id``, ``player_id`` and ``round_id``
(pass them as ``extra={...}``).

No credential reaches a log line, in either format, at any level, whatever logger wrote it:
the one handler :func:`configure` installs carries :class:`RedactCredentials` (message,
traceback and stack) and its formatters run :func:`redact` over what they print. A
credential is recognised by where it travels, not by what it looks like (see :func:`redact`).
No round's secret either: the SQL drivers, whose lines carry statements' parameters, log
at WARNING whatever the level.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Literal
from urllib.parse import unquote_plus

import orjson

__all__ = [
    "CONTEXT_FIELDS",
    "JsonFormatter",
    "LogFormat",
    "RedactCredentials",
    "configure",
    "redact",
]

LogFormat = Literal["text", "json"]
CONTEXT_FIELDS = ("job_id", "worker_id", "player_id", "round_id")
TEXT_FORMAT = "%(asctime)s %(levelname).1s %(name)s[%(process)d] %(message)s"

REDACTED = "…"
# The SQL drivers log each statement with its parameters (SQLAlchemy's engine at INFO,
# aiosqlite each call at DEBUG), and a round's INSERT carries its secret: they stay at
# WARNING whatever the level asked for.
SQL_LOGGERS = ("sqlalchemy", "aiosqlite", "asyncpg")

# A query parameter (``?token=…``, ``&admin_token=…``): any name=value after ?, &, ; or a
# space or quote; whether it is a credential is decided on the decoded name (_secret_name).
_PARAM = re.compile(
    r"(?P<head>(?:^|[?&;\s\"'(\[,])(?P<name>[^\s=&;?\"'#<>,()\[\]]{1,96})=)"
    r"(?P<value>[^&\s\"'<>]*)"
)
_SECRET_NAME = re.compile(r"(?:token|authorization|password|passwd|secret|api_?key)$")
# A header of credentials, in a header dump (``< authorization: Bearer …``), a repr of a
# mapping (``'authorization': '…'``) or of a header list (``(b'authorization', b'…')``).
_AUTH_HEADER = re.compile(
    r"(\b(?:proxy-)?authorization(?:\s*[:=]\s*[\"']?|[\"']\s*[:=,]\s*b?[\"']))[^\r\n\"']+",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(\bbearer\s+)[^\s\"',;]+", re.IGNORECASE)
# The websocket's token subprotocol (web.ws.TOKEN_SUBPROTOCOL_PREFIX), as offered in the
# Sec-WebSocket-Protocol header: the rest of that list entry.
_SUBPROTOCOL = re.compile(r"(codemojex\.token\.)[^\r\n,\"']+", re.IGNORECASE)
# A JSON or repr key naming a token: ``"token": "…"`` (a player's creation answer, say).
_KEYED = re.compile(r"([\"'][\w.-]*token[\"']\s*:\s*[\"'])[^\"'\\]+", re.IGNORECASE)
# A password in a URL (``redis://:pw@host``), as the command line prints one.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@/\s]+@", re.IGNORECASE)


def _secret_name(name: str) -> bool:
    """Whether a query parameter's name names a credential, as a server would read it:
    percent- and plus-decoded (again while that changes it: ``%2574oken`` too), any case,
    spaces around it ignored. ``%74oken``, ``TOKEN`` and ``t%6Fken`` are ``token``."""
    for _ in range(4):
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    return _SECRET_NAME.search(name.strip().lower()) is not None


def _param(match: re.Match[str]) -> str:
    if _secret_name(match["name"]) and match["value"]:
        return match["head"] + REDACTED
    return match[0]


def redact(text: str) -> str:
    """``text`` with every credential replaced by ``…``, wherever one can travel: a query
    parameter whose decoded name is a credential's (``token``, ``access_token``,
    ``admin_token``, … in any percent-encoding and case), an ``Authorization`` header (any
    scheme), a ``Bearer`` credential, the websocket's ``codemojex.token.<token>``
    subprotocol, a JSON key ending in ``token``, and a URL's password."""
    if "=" in text:
        text = _PARAM.sub(_param, text)
    text = _AUTH_HEADER.sub(r"\1" + REDACTED, text)
    text = _BEARER.sub(r"\1" + REDACTED, text)
    text = _SUBPROTOCOL.sub(r"\1" + REDACTED, text)
    text = _KEYED.sub(r"\1" + REDACTED, text)
    if "@" in text:
        text = _URL_PASSWORD.sub(r"\1***@", text)
    return text


class RedactCredentials(logging.Filter):
    """Rewrites a record with :func:`redact` before any handler formats it: its message,
    its traceback (formatted here, once, so every formatter prints the redacted text) and
    its stack. On the root handler it sees every record, whichever logger wrote it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the handler's problem
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _PLAIN.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_PLAIN = logging.Formatter()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": redact(record.getMessage()),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = redact(record.exc_text)
        return orjson.dumps(out, default=str).decode()


class _RedactingText(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(level: str, fmt: LogFormat = "text") -> None:
    """The root logger to stderr, at ``level``, in ``fmt``; noisy libraries and the SQL
    drivers (:data:`SQL_LOGGERS`: their lines carry the round's secret) at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactCredentials())
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _RedactingText(TEXT_FORMAT, datefmt="%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "alembic.runtime.plugins", *SQL_LOGGERS):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
