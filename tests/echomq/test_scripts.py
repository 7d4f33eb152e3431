"""echomq's script loader as an application uses it (``echomq.scripts.Script``): ``--@include``
splicing from its own directories and echomq's, EVALSHA with the NOSCRIPT fallback, and
the token bucket include (``bucket``) shared by lane_enqueue and the application's scripts,
including a bucket kept in the layout codemojex's take_token wrote before the two were one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

import echomq
from echomq.scripts import SCRIPTS, Script

# An application's own bucket script, as codemojex/lua/take_token.lua is one.
TAKE = """--@include bucket
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens, retry_ms = bucket_peek(KEYS[1], rate, burst, now)
if retry_ms > 0 then
  return {0, retry_ms}
end
bucket_take(KEYS[1], tokens, rate, burst, now)
return {1, 0}
"""


def _take_script(tmp_path: Path) -> Script:
    path = tmp_path / "take.lua"
    path.write_text(f"-- {uuid4().hex}: a script no server has cached yet\n{TAKE}")
    return Script.from_file(path)


def test_an_include_is_spliced_from_the_applications_directory_first(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "mine.lua").write_text("local MINE = 1")
    (tmp_path / "inc" / "bucket.lua").write_text("local SHADOWED = 1")
    (tmp_path / "s.lua").write_text("--@include mine\n--@include common\nreturn MINE")
    script = Script.from_file(tmp_path / "s.lua", includes=[tmp_path / "inc"])
    assert script.name == "s"
    assert script.source.startswith("local MINE = 1\n")
    assert "local function server_now()" in script.source  # echomq's common.lua
    assert "--@include" not in script.source
    shadowed = tmp_path / "b.lua"
    shadowed.write_text("--@include bucket\n")
    assert "SHADOWED" in Script.from_file(shadowed, includes=[tmp_path / "inc"]).source


def test_an_include_found_nowhere_fails_at_load(tmp_path: Path) -> None:
    (tmp_path / "s.lua").write_text("--@include nosuch\nreturn 1\n")
    with pytest.raises(FileNotFoundError, match="nosuch"):
        Script.from_file(tmp_path / "s.lua")


def test_echomqs_own_scripts_come_from_the_same_loader() -> None:
    lane_enqueue = Script.from_file(Path(echomq.__file__).with_name("lua") / "lane_enqueue.lua")
    assert lane_enqueue == SCRIPTS["lane_enqueue"]
    assert "local function bucket_peek(" in lane_enqueue.source


async def test_a_script_the_server_never_saw_runs_and_is_cached(
    redis_conn: Any, tmp_path: Path
) -> None:
    take = _take_script(tmp_path)
    assert await redis_conn.script_exists(take.sha) == [False]
    key = f"t:bucket:{uuid4().hex}"
    assert [int(x) for x in await take.run(redis_conn, [key], [1, 2])] == [1, 0]
    assert await redis_conn.script_exists(take.sha) == [True]  # EVAL cached it
    assert [int(x) for x in await take.run(redis_conn, [key], [1, 2])] == [1, 0]
    taken, retry_ms = await take.run(redis_conn, [key], [1, 2])
    assert int(taken) == 0 and 1 <= int(retry_ms) <= 1000


async def test_a_bucket_lane_enqueue_spent_is_empty_for_the_applications_script(
    redis_conn: Any, queue_name: str, tmp_path: Path
) -> None:
    q = echomq.Queue(redis_conn, queue_name)
    rate = 0.001  # one token in 1000 s: nothing refills during the test
    await q.lanes.submit("p", 0, rate_subject="s", rate_per_s=rate, rate_burst=2)
    take = _take_script(tmp_path)
    taken, _ = await take.run(redis_conn, [q.keys.rate("s")], [rate, 2])
    assert int(taken) == 1  # the second of the burst
    taken, retry_ms = await take.run(redis_conn, [q.keys.rate("s")], [rate, 2])
    assert int(taken) == 0 and int(retry_ms) > 900_000
    with pytest.raises(echomq.RateLimited):
        await q.lanes.submit("p", 1, rate_subject="s", rate_per_s=rate, rate_burst=2)


async def test_a_bucket_in_the_old_take_token_layout_keeps_its_time(
    redis_conn: Any, tmp_path: Path
) -> None:
    # Written by take_token before the shared layout: {tokens, at_ms}, no `ts`.
    key = f"t:bucket:{uuid4().hex}"
    sec, usec = await redis_conn.time()
    now = sec * 1000 + usec // 1000
    await redis_conn.hset(key, mapping={"tokens": "0", "at_ms": now - 600})
    await redis_conn.pexpire(key, 60_000)
    taken, retry_ms = await _take_script(tmp_path).run(redis_conn, [key], [1, 1])
    # 600 ms of refill counted: the next token is due in about 400 ms, not a whole second
    assert int(taken) == 0 and 1 <= int(retry_ms) <= 400
