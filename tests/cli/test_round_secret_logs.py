"""The open round's secret reaches no log line of any process of ``up``, at debug level, in
either log format: the SQL drivers' loggers (aiosqlite logs each call with its
parameters, SQLAlchemy's engine each statement with its parameters) stay at WARNING."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import httpx
import orjson
import pytest

from harness.running import Up, wait_until

pytestmark = pytest.mark.slow


def _stored_secret(up: Up, round_id: str) -> str:
    """The round's secret as SQL holds it (a JSON list of emojis)."""
    with sqlite3.connect(up.data_dir / "codemojex.db") as db:
        row = db.execute("SELECT secret FROM rounds WHERE round_id = ?", (round_id,)).fetchone()
    assert row is not None, f"round {round_id} is not in SQL"
    return str(row[0])


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_round_secret_reaches_any_log_line_at_debug_level(
    start_up: Callable[..., Up], fmt: str
) -> None:
    up = start_up("--workers", "1", "--log-level", "debug", "--log-format", fmt)
    with httpx.Client(base_url=up.base, timeout=5, trust_env=False) as http:
        player = http.post("/api/players", json={"name": "peek"}).json()
        rnd = http.get("/api/round").json()
        r = http.post(
            "/api/guesses",
            json={"round_id": rnd["round_id"], "guess": rnd["palette"][:4]},
            headers={"Authorization": f"Bearer {player['token']}"},
        )
        assert r.status_code == 202, r.text
        job = f"/api/guesses/{r.json()['job_id']}"
        headers = {"Authorization": f"Bearer {player['token']}"}
        # Scored: the worker has read the round too.
        wait_until(
            lambda: http.get(job, headers=headers).json().get("score") is not None,
            15,
            "the guess to be scored",
            up.logs,
        )
    stored = _stored_secret(up, rnd["round_id"])
    secret = list(orjson.loads(stored))
    assert up.stop() == 0, up.logs()
    logs = up.err_path.read_text(errors="replace") + up.out_path.read_text(errors="replace")
    forms = {
        stored,
        repr(stored),  # inside a repr of the statement's parameters
        json.dumps(stored, ensure_ascii=False)[1:-1],  # inside a JSON log line's string
        orjson.dumps(secret).decode(),
        json.dumps(secret),  # ASCII-escaped
        "".join(secret),
        ", ".join(repr(e) for e in secret),  # a row's repr
    }
    for form in forms:
        assert form not in logs, f"the secret ({form}) is in the log"
    assert "INSERT INTO rounds" not in logs and "executing functools" not in logs  # drivers quiet
