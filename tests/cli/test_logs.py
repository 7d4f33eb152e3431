"""``--log-format json``: every log line of every process of ``up`` is one JSON object, with
the worker's id where it applies, and no token in any of them."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import orjson
import pytest

from harness.running import Up

pytestmark = pytest.mark.slow


def test_json_logs_from_every_process(start_up: Callable[..., Up]) -> None:
    up = start_up("--workers", "1", "--log-format", "json", "--log-level", "debug")
    with httpx.Client(base_url=up.base, timeout=5, trust_env=False) as http:
        player = http.post("/api/players", json={"name": "json"}).json()
        rnd = http.get("/api/round").json()
        r = http.post(
            "/api/guesses",
            json={"round_id": rnd["round_id"], "guess": rnd["palette"][:4]},
            headers={"Authorization": f"Bearer {player['token']}"},
        )
        assert r.status_code == 202
    assert up.stop() == 0, up.logs()
    lines = up.err_path.read_text().splitlines()
    records = []
    for line in lines:
        if line.startswith("codemojex: "):
            continue  # up's own one-line verdicts ("stopped"), not log records
        records.append(orjson.loads(line))  # every other line is one JSON object
    assert records and all({"ts", "level", "logger", "pid", "msg"} <= set(r) for r in records)
    assert len({r["pid"] for r in records}) >= 3  # up, web, worker
    scoring = [r for r in records if r["msg"].startswith("worker ")]
    assert scoring and scoring[0]["worker_id"].startswith("WRK_")
    assert player["token"] not in "\n".join(lines)
