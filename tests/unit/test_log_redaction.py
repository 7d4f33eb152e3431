"""``codemojex.logs``: every form a credential travels in is redacted, and nothing else is;
the filter on the handler redacts a record whatever logger wrote it, its traceback too.
(The real processes at debug level: tests/cli/test_secrets.py.)"""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from codemojex.logs import JsonFormatter, RedactCredentials, redact

TOKEN = "Dra1mx8N_xa61WL3zz1RkFp34vDPLMCn"


@pytest.mark.parametrize(
    "line",
    [
        f"< GET /ws?token={TOKEN} HTTP/1.1",
        f"< GET /ws?%74oken={TOKEN}&after=0-0 HTTP/1.1",
        f"< GET /ws?%74%6F%6B%65%6E={TOKEN} HTTP/1.1",
        f"/ws?TOKEN={TOKEN}",
        f"/ws?t%6Fken={TOKEN}",
        f"/ws?%2574oken={TOKEN}",
        f"/ws?+token={TOKEN}",
        f"/ws?after=0-0&access_token={TOKEN}",
        f"/api/x?admin_token={TOKEN}",
        f'127.0.0.1:1 - "WebSocket /ws?token={TOKEN}" [accepted]',
        f"< sec-websocket-protocol: codemojex, codemojex.token.{TOKEN}",
        f"< Sec-WebSocket-Protocol: CODEMOJEX.TOKEN.{TOKEN}, codemojex",
        f"< authorization: Bearer {TOKEN}",
        f"< Authorization: {TOKEN}",
        f"< Authorization: Basic {TOKEN}",
        f"headers={{'authorization': 'Bearer {TOKEN}', 'host': 'x'}}",
        f"[(b'authorization', b'{TOKEN}'), (b'host', b'x')]",
        f"send bearer {TOKEN} again",
        f'{{"player_id": "PLR_1", "token": "{TOKEN}"}}',
        f"cannot reach redis://:{TOKEN}@valkey:6379/0",
    ],
)
def test_each_form_a_token_travels_in_is_redacted(line: str) -> None:
    clean = redact(line)
    assert TOKEN not in clean and TOKEN[:8] not in clean, clean
    assert redact(clean) == clean  # redacting twice changes nothing


@pytest.mark.parametrize(
    "line",
    [
        "GET /api/round HTTP/1.1 200",
        "/ws?after=1700000000000-0&x=1",
        '127.0.0.1:1 - "GET /api/leaderboard?round_id=RND_01J0 HTTP/1.1" 200',
        "the admin token is required",
        "missing authorization header",
        "Idempotency-Key=abc",
        "redis://127.0.0.1:6379/0",
    ],
)
def test_lines_without_credentials_are_left_alone(line: str) -> None:
    assert redact(line) == line


def _logged(formatter: logging.Formatter, logger_name: str) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactCredentials())
    handler.setFormatter(formatter)
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.debug("< %s: %s", "sec-websocket-protocol", f"codemojex.token.{TOKEN}")
        try:
            raise ValueError(f"bad header: Authorization: Bearer {TOKEN}")
        except ValueError:
            logger.exception("handshake failed for /ws?%%74oken=%s", TOKEN)
        logger.warning("stack", stack_info=True, extra={"x": f"token={TOKEN}"})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_the_handler_filter_redacts_message_traceback_and_stack_of_any_logger(fmt: str) -> None:
    # A plain logging.Formatter redacts nothing itself: the filter alone does it here.
    formatter = logging.Formatter() if fmt == "plain" else JsonFormatter()
    logging.getLogger("websockets.server.test").setLevel(logging.DEBUG)
    text = _logged(formatter, "websockets.server.test")
    assert TOKEN not in text, text
    assert "codemojex.token.…" in text and "Traceback" in text
    if fmt == "json":
        records = [orjson.loads(line) for line in text.splitlines()]
        assert "exc" in records[1] and "ValueError" in records[1]["exc"]


@pytest.mark.parametrize("level", ["debug", "info"])
def test_the_sql_drivers_stay_at_warning_whatever_the_level(level: str) -> None:
    # Their lines carry statements' parameters: a round's INSERT carries its secret.
    from codemojex.logs import SQL_LOGGERS, configure

    root = logging.getLogger()
    handlers, root_level = root.handlers[:], root.level
    try:
        configure(level)
        for name in (*SQL_LOGGERS, "sqlalchemy.engine.Engine", "aiosqlite"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert logging.getLogger("codemojex").isEnabledFor(logging.getLevelName(level.upper()))
    finally:
        root.handlers[:] = handlers
        root.setLevel(root_level)
