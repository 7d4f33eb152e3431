"""Log lines for people (``text``, the default) or for machines (``json``: one object a line).

JSON lines carry ``ts`` (epoch seconds), ``level``, ``logger``, ``pid``, ``msg`` and, where
the code that logged knew them, ``job_id``, ``worker_id``, ``player_id`` and ``round_id``
(pass them as ``extra={...}``). Every message goes through :func:`web.server.redact`'s rules
here too, so no token reaches a log line in either format.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Literal

import orjson

__all__ = ["CONTEXT_FIELDS", "JsonFormatter", "LogFormat", "configure", "redact"]

LogFormat = Literal["text", "json"]
CONTEXT_FIELDS = ("job_id", "worker_id", "player_id", "round_id")
TEXT_FORMAT = "%(asctime)s %(levelname).1s %(name)s[%(process)d] %(message)s"

_CREDENTIAL = re.compile(r"((?:^|[?&\s\"'])(?:token|access_token)=)[^&\s\"']+", re.IGNORECASE)
_BEARER = re.compile(r"(bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with query-string tokens and bearer credentials replaced by ``…``."""
    return _BEARER.sub(r"\1…", _CREDENTIAL.sub(r"\1…", text))


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
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return orjson.dumps(out, default=str).decode()


class _RedactingText(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure(level: str, fmt: LogFormat = "text") -> None:
    """The root logger to stderr, at ``level``, in ``fmt``; noisy libraries at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _RedactingText(TEXT_FORMAT, datefmt="%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
