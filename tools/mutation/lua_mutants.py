"""Mutation testing of the Lua transitions: a table of hand-written mutants, each run
against the tests nearest it.

    uv run python -m tools.mutation.lua_mutants               # every mutation
    uv run python -m tools.mutation.lua_mutants --area fencing
    uv run python -m tools.mutation.lua_mutants --only complete-no-token --rev HEAD
    uv run python -m tools.mutation.lua_mutants --list

mutmut and cosmic-ray mutate Python only, and the queue's guarantees live in
``echomq/lua/``. Each row of ``MUTATIONS`` names one change a careless edit could make
(delete a check, swap a comparison, an off-by-one, drop a write): an exact text to find
in one script (it must occur exactly once), its replacement, and the tests that should
notice. The runner copies the tree to ``/tmp/codemojex-mutation/lua`` (never the
checkout: see ``tree.py``), runs each row's tests once unmutated (a red baseline voids
the row), then applies one mutation at a time, runs its tests (``-x``, bounded) and puts
the script back. A mutant is *killed* when a test fails, *survived* when all pass, and
*equivalent* when it survives and its row says why no test can tell it apart.

Report: a table on the terminal, ``tools/mutation/out/lua.json`` and ``lua.html``.
``tests/test_mutation_tables.py`` checks on every suite run that each row still finds
its text in the current source, so the table cannot silently rot.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tools.mutation.tree import OUT, ROOT, copy_tree, describe

LUA = Path("echomq/lua")
WORK = Path("/tmp/codemojex-mutation/lua")
RUN_TIMEOUT_S = 600  # one mutant's whole test run; a hang past this counts as "timeout"

# The nearest tests of each concern, cheapest first (-x stops at the first failure).
FENCING = (
    "tests/echomq/test_transitions.py",
    "tests/echomq/test_faults.py",
    "tests/game/test_zombie_while_active.py",
    "tests/echomq/test_consumer.py",
)
LANES = (
    "tests/echomq/test_fair_order.py",
    "tests/echomq/test_transitions.py",
    "tests/load/test_fairness.py",
)
BACKOFF = (
    "tests/echomq/test_faults.py",
    "tests/echomq/test_backoff_edges.py",
    "tests/echomq/test_transitions.py",
)
# A row holds `max` only away from the default: what writes and reads it.
DEFAULT_MAX = ("tests/echomq/test_batched_transitions.py",)
REAP = (
    "tests/echomq/test_transitions.py",
    "tests/echomq/test_faults.py",
    "tests/echomq/test_reap_ownership.py",
)
# One test, not the file: its neighbour test_a_gap_in_sweeps_… sleeps against a 400 ms lapse
# and fails on a loaded machine (a red baseline would void the row).
REAPER_LOCK = (
    "tests/echomq/test_reaper_lock.py::test_one_reaper_holds_the_lock_until_it_stops_or_lapses",
)
ADMISSION = ("tests/echomq/test_admission.py", "tests/echomq/test_transitions.py")
# The token bucket include: lane_enqueue's rate limit and the game's take_token share it.
BUCKET = (
    "tests/echomq/test_scripts.py",
    "tests/echomq/test_admission.py",
    "tests/web/test_admission_players.py",
)


@dataclass(frozen=True)
class Mutation:
    id: str
    area: str  # fencing | lane order | owner filtering | backoff | reaping | admission
    file: str  # under echomq/lua/
    find: str  # exact text, found exactly once in the file
    replace: str
    tests: tuple[str, ...]
    breaks: str  # the guarantee a survivor would leave unguarded
    # Why no test can kill it (it changes no reachable behaviour); a survivor that says
    # so is reported "equivalent", not "survived". Empty for every ordinary row.
    equivalent: str = ""


M = Mutation
# fmt: off
MUTATIONS: tuple[Mutation, ...] = (
    # -- fencing: the attempts counter is the token; a mismatch changes nothing --------
    M("complete-no-token", "fencing", "complete.lua",
      "if row[1] ~= 'active' or row[2] ~= token or not mine then",
      "if row[1] ~= 'active' or not mine then", FENCING,
      "a zombie completes a job another holder now owns"),
    M("complete-no-state", "fencing", "complete.lua",
      "if row[1] ~= 'active' or row[2] ~= token or not mine then",
      "if row[2] ~= token or not mine then", FENCING,
      "a completion of a released / scheduled job with the old token counts"),
    M("complete-replay-any-token", "fencing", "complete.lua",
      "if row[1] == 'completed' and row[2] == token and mine then",
      "if row[1] == 'completed' then", FENCING,
      "a stale holder is told its completion counted (true instead of stale)"),
    M("complete-no-replay", "fencing", "complete.lua",
      "if row[1] == 'completed' and row[2] == token and mine then",
      "if false then", FENCING,
      "a re-sent completion batch (lost reply) is reported stale"),
    M("holds-no-token", "fencing", "include/common.lua",
      "return row[1] == 'active' and row[2] == token",
      "return row[1] == 'active'", FENCING,
      "extend/fail/release by a zombie while the job is active under a newer token"),
    M("holds-no-state", "fencing", "include/common.lua",
      "return row[1] == 'active' and row[2] == token",
      "return row[2] == token", FENCING,
      "extend/fail/release of a job no longer active (released, scheduled)"),
    M("extend-unfenced", "fencing", "extend.lua",
      "if not holds(jk, token, ARGV[4]) then",
      "if false then", FENCING,
      "a zombie extends the new holder's lease"),
    M("fail-unfenced", "fencing", "fail.lua",
      "if not holds(jk, token, ARGV[10]) then",
      "if false then", FENCING,
      "a zombie fails (and reschedules) the new holder's job"),
    M("release-unfenced", "fencing", "release.lua",
      "if not holds(jk, token, ARGV[4])\n",
      "if false\n", FENCING,
      "a zombie hands the new holder's job back"),
    M("claim-no-token-bump", "fencing", "include/common.lua",
      "local token = count(row[1], 0) + 1",
      "local token = count(row[1], 0)", FENCING,
      "two deliveries share one token: the old holder is never fenced off"),
    M("complete-batch-counts-a-repeat", "fencing", "complete.lua",
      "  if first then\n",
      "  if false then\n", ("tests/echomq/test_batched_transitions.py", *FENCING),
      "a job named twice in one completion batch is counted (and announced) twice"),
    M("complete-keeps-active", "fencing", "complete.lua",
      "each_slice(ids, function(...) redis.call('ZREM', K_ACTIVE, ...) end)\n",
      "\n", FENCING,
      "a completed job stays in active and is reaped (delivered again)"),
    # -- owner filtering: a holder acts only on what it holds --------------------------
    M("release-any-worker", "owner filtering", "release.lua",
      "or (worker and worker ~= '' and redis.call('HGET', jk, 'worker') ~= worker) then",
      "or false then", FENCING,
      "a consumer releasing orphans hands back another worker's lease"),
    M("reap-lapsed-any-worker", "owner filtering", "reap.lua",
      "if row[1] == 'active' and row[2] == worker then",
      "if row[1] == 'active' then", REAP,
      "a lapsed worker's stale set reclaims jobs another worker now holds"),
    M("reap-lapsed-any-state", "owner filtering", "reap.lua",
      "if row[1] == 'active' and row[2] == worker then",
      "if row[2] == worker then", REAP,
      "a lapsed worker's finished jobs are stalled back onto their lane",
      "every script that takes a job out of `active` also clears the row's `worker` "
      "(unlease deletes it, complete blanks it), so a row naming the worker is always active"),
    M("claim-no-worker-set", "owner filtering", "include/common.lua",
      "redis.call('SADD', K_HELD, unpack(good, first, last))",
      "redis.call('TYPE', K_HELD)", REAP,
      "a dead worker's jobs wait out the whole lease (not reclaimed on lapse)"),
    # -- lane order: sparse lanes first, then the ring, alternating ---------------------
    M("lane-no-alternation", "lane order", "lane_claim.lua",
      "if new_left and not owed then",
      "if new_left then", LANES,
      "a flood of new lanes starves the ring"),
    M("lane-never-owed", "lane order", "lane_claim.lua",
      "  owed = fresh\n",
      "  owed = false\n", LANES,
      "a flood of new lanes starves the ring"),
    M("lane-ring-to-head", "lane order", "lane_claim.lua",
      "redis.call('RPUSH', K_RING, unpack(back, first, math.min(first + 999, #back)))",
      "redis.call('LPUSH', K_RING, unpack(back, first, math.min(first + 999, #back)))", LANES,
      "the ring is a stack: the busiest lane is served again at once"),
    M("lane-ring-off-by-one", "lane order", "lane_claim.lua",
      "if left > 0 then\n    back[#back + 1] = lane",
      "if left > 1 then\n    back[#back + 1] = lane", LANES,
      "a lane left with one job drops out of both lists: the job is stranded"),
    M("lane-depth-read-again", "lane order", "lane_claim.lua",
      "local left = depth[lane]",
      "local left = nil", LANES,
      "a lane served twice in one batch is counted full again: steps take jobs it no "
      "longer has, and the batch differs from single claims"),
    M("lane-newest-first", "lane order", "lane_claim.lua",
      "redis.call('ZPOPMIN', lane_key(lane), took[lane])",
      "redis.call('ZPOPMAX', lane_key(lane), took[lane])", LANES,
      "a lane serves its newest job first"),
    M("lane-owed-not-kept", "lane order", "lane_claim.lua",
      "if owed then redis.call('SET', K_OWED, '1') else redis.call('DEL', K_OWED) end",
      "", LANES,
      "a batch of N claims orders jobs differently from N single claims"),
    M("place-new-to-head", "lane order", "include/common.lua",
      "redis.call('RPUSH', K_NEW, lane)",
      "redis.call('LPUSH', K_NEW, lane)", LANES,
      "activations are served last-in first-out"),
    M("place-activate-always", "lane order", "include/common.lua",
      "if redis.call('ZCARD', lk) == 1 then",
      "if redis.call('ZCARD', lk) >= 1 then", LANES,
      "a busy lane re-joins `new` on every arrival: mashing jumps the queue"),
    M("place-never-activate", "lane order", "include/common.lua",
      "if redis.call('ZCARD', lk) == 1 then",
      "if false then", LANES,
      "a lane that becomes non-empty is in no list: its jobs are never claimed"),
    # -- backoff: base * 2^(failures-1), capped at cap/(1+ratio), jitter within the cap -
    M("backoff-off-by-one", "backoff", "fail.lua",
      "2 ^ (failures - 1)",
      "2 ^ failures", BACKOFF,
      "the first retry waits twice the base"),
    M("backoff-triples", "backoff", "fail.lua",
      "2 ^ (failures - 1)",
      "3 ^ (failures - 1)", BACKOFF,
      "retries spread out faster than documented"),
    M("backoff-no-plateau", "backoff", "fail.lua",
      "math.min(tonumber(ARGV[6]) * 2 ^ (failures - 1), cap / (1 + ratio))",
      "tonumber(ARGV[6]) * 2 ^ (failures - 1)", BACKOFF,
      "the doubling goes on past the cap (only the final clamp holds)"),
    M("backoff-no-cap", "backoff", "fail.lua",
      "math.floor(math.min(delay * (1 + ratio * tonumber(ARGV[5])), cap))",
      "math.floor(delay * (1 + ratio * tonumber(ARGV[5])))", BACKOFF,
      "a jittered delay passes the cap",
      "the doubling stops at cap / (1 + ratio) and the client's jitter factor is in "
      "[-1, 1], so delay * (1 + ratio * f) <= cap already; the clamp is a guard for a "
      "foreign caller"),
    M("backoff-no-jitter", "backoff", "fail.lua",
      "delay * (1 + ratio * tonumber(ARGV[5]))",
      "delay", BACKOFF,
      "retries of a burst of failures run in step (a herd)"),
    M("backoff-jitter-sign", "backoff", "fail.lua",
      "(1 + ratio * tonumber(ARGV[5]))",
      "(1 - ratio * tonumber(ARGV[5]))", BACKOFF,
      "jitter inverted (the client's draw is symmetric: see docs/testing.md)"),
    M("backoff-zero-delay-is-backoff", "backoff", "fail.lua",
      "if delay < 0 then",
      "if delay <= 0 then", BACKOFF,
      "an explicit retry_in=0 waits the backoff instead"),
    M("fail-not-scheduled", "backoff", "fail.lua",
      "redis.call('ZADD', K_SCHEDULED, now + delay, id)",
      "", BACKOFF,
      "a failed job is never retried"),
    M("fail-one-extra-delivery", "backoff", "fail.lua",
      ">= (tonumber(row[3] or DEFAULT_MAX_ATTEMPTS) or 0) then",
      "> (tonumber(row[3] or DEFAULT_MAX_ATTEMPTS) or 0) then", BACKOFF,
      "a job is delivered max_attempts + 1 times"),
    M("fail-absent-max-is-one", "backoff", "fail.lua",
      "row[3] or DEFAULT_MAX_ATTEMPTS",
      "row[3] or '1'", DEFAULT_MAX,
      "a job enqueued at the default max_attempts (its row holds no max) dies at its first "
      "failure"),
    M("stall-absent-max-is-one", "reaping", "include/common.lua",
      "count(row[4], DEFAULT_MAX_ATTEMPTS)",
      "count(row[4], 1)", DEFAULT_MAX,
      "a job enqueued at the default max_attempts dies at its first lease expiry"),
    M("enqueue-drops-max", "backoff", "include/arrive.lua",
      "if tonumber(max) ~= DEFAULT_MAX_ATTEMPTS then",
      "if false then", DEFAULT_MAX,
      "a plain job's max_attempts other than the default is lost: it gets 5 deliveries"),
    M("lane-enqueue-drops-max", "backoff", "lane_enqueue.lua",
      "if tonumber(ARGV[4]) ~= DEFAULT_MAX_ATTEMPTS then",
      "if false then", DEFAULT_MAX,
      "a lane job's max_attempts other than the default is lost: it gets 5 deliveries"),
    M("claim-past-max-token", "fencing", "include/common.lua",
      "if attempts == nil or attempts >= MAX_TOKEN then",
      "if attempts == nil then", ("tests/echomq/test_token_bound.py",),
      "a claim hands out a token past MAX_TOKEN, which every fenced call refuses"),
    M("release-strike-always", "backoff", "release.lua",
      "if marks[1] and done > (tonumber(marks[1]) or done) then strikes = strikes + 1 end",
      "strikes = strikes + 1", ("tests/echomq/test_unavailable_poison.py",),
      "an outage's hand-backs strike the jobs: a long one fails the probes it hands back"),
    M("release-never-exhausted", "backoff", "release.lua",
      "if strikes >= bound then return 2 end",
      "if false then return 2 end", ("tests/echomq/test_unavailable_poison.py",),
      "a job that always raises Unavailable is handed back for ever, throttling everyone"),
    # -- reaping -------------------------------------------------------------------------
    M("stall-one-extra-delivery", "reaping", "include/common.lua",
      "if failures + stalls >= max then",
      "if failures + stalls > max then", REAP,
      "a job whose holders keep dying is delivered max_attempts + 1 times"),
    M("reap-expired-early", "reaping", "reap.lua",
      "redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, limit, 'WITHSCORES')",
      "redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', '+inf', 'LIMIT', 0, limit, 'WITHSCORES')",
      REAP, "live leases are reclaimed before their deadline"),
    M("reap-defers-for-ever", "reaping", "reap.lua",
      "if gap <= 0 or deadline <= now - horizon then return false end",
      "if gap <= 0 then return false end", ("tests/echomq/test_lease_pulse.py",),
      "a holder that beats but never renews keeps its job for ever"),
    M("reap-defers-never", "reaping", "reap.lua",
      "return beat ~= nil and beat > now",
      "return false", ("tests/echomq/test_lease_pulse.py",),
      "a short lease is reaped across a freeze shorter than the gap: its handler runs twice"),
    M("reap-lock-ignored", "reaping", "reap.lua",
      "if holder and holder ~= reaper then",
      "if false then", REAPER_LOCK,
      "every consumer process reaps: the one-reaper lock is decoration"),
    M("extend-no-deadline", "reaping", "extend.lua",
      "redis.call('ZADD', K_ACTIVE, until_ms, id)",
      "", REAP + ("tests/echomq/test_consumer.py",),
      "an extended lease still expires at the old deadline in the reaper's view"),
    # -- admission -----------------------------------------------------------------------
    M("rate-off-by-one", "admission", "include/bucket.lua",
      "if tokens < 1 then",
      "if tokens < 0 then", ADMISSION,
      "a rate-limited subject gets one more job than its burst"),
    M("bucket-no-refill", "admission", "include/bucket.lua",
      "tonumber(b[1]) + math.max(0, now - ts) * rate / 1000",
      "tonumber(b[1])", BUCKET,
      "a spent bucket never refills until its key expires: a subject waits out the whole burst"),
    M("bucket-take-spends-nothing", "admission", "include/bucket.lua",
      "redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', now)",
      "", BUCKET,
      "a take writes no level: the rate limit admits everything"),
    M("bucket-old-layout-unread", "admission", "include/bucket.lua",
      "local ts = tonumber(b[2] or b[3] or '') or now",
      "local ts = tonumber(b[2] or '') or now", BUCKET,
      "after an upgrade, a bucket in take_token's old layout refills nothing until it expires"),
    M("cap-ignores-foreign", "admission", "include/common.lua",
      "return n >= limit and n - foreign_of(subject) >= limit",
      "return n >= limit", ADMISSION,
      "a lane's jobs counted against another subject fill its own subject's cap"),
    M("claim-no-open-entry", "admission", "include/common.lua",
      "redis.call('ZADD', open_key(lane), unpack(entries, first, math.min(first + 1999, #entries)))",
      "", ADMISSION,
      "a lane's claimed jobs leave its load: the cap admits a job per job being scored"),
    M("deadline-ignored", "admission", "lane_enqueue.lua",
      "if deadline > 0 and now >= deadline then",
      "if false then", ADMISSION,
      "a guess past its deadline is accepted"),
    M("dedup-other-fingerprint", "admission", "lane_enqueue.lua",
      "if bound[2] ~= fp then",
      "if false then", ADMISSION,
      "a reused idempotency key with another body replays the first receipt"),
)
# fmt: on


def check_table(source_root: Path = ROOT) -> list[str]:
    """Problems with the table against the sources under ``source_root`` (empty: none)."""
    problems = []
    seen = set()
    for m in MUTATIONS:
        if m.id in seen:
            problems.append(f"{m.id}: duplicate id")
        seen.add(m.id)
        path = source_root / LUA / m.file
        if not path.is_file():
            problems.append(f"{m.id}: no file {path}")
            continue
        n = path.read_text().count(m.find)
        if n != 1:
            problems.append(f"{m.id}: its text occurs {n} times in {m.file} (needs exactly 1)")
        if m.find == m.replace:
            problems.append(f"{m.id}: the replacement changes nothing")
        for t in m.tests:
            if not (source_root / t.split("::")[0]).is_file():
                problems.append(f"{m.id}: no test file {t}")
    return problems


@dataclass
class Outcome:
    id: str
    area: str
    file: str
    status: str  # killed | survived | timeout | stale pattern | baseline failed
    seconds: float
    killed_by: str
    breaks: str
    find: str
    replace: str


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[str, float, str]:
    """Run ``tests`` in ``copy``: (passed | failed | timeout, seconds, first failing test)."""
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    env.pop("MUTANT_UNDER_TEST", None)
    started = time.monotonic()
    cmd = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-x", "-q", "--timeout=120"]
    try:
        done = subprocess.run(
            [*cmd, *tests], check=False, cwd=copy, env=env, capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started, ""
    seconds = time.monotonic() - started
    if done.returncode == 0:
        return "passed", seconds, ""
    failed = _FAILED.search(done.stdout)
    first = failed.group(1) if failed else done.stdout.strip().splitlines()[-1:][0][:200]
    return "failed", seconds, first


def run(mutations: list[Mutation], rev: str | None, console: Console) -> list[Outcome]:
    copy = copy_tree(WORK, rev)
    problems = check_table(copy)
    stale = {p.split(":", 1)[0] for p in problems}
    for p in problems:
        console.print(f"[red]table:[/] {p}")
    baselines: dict[tuple[str, ...], tuple[str, str]] = {}
    outcomes: list[Outcome] = []
    with Progress(
        TextColumn("[bold]lua[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("", total=len(mutations))
        for m in mutations:
            bar.update(task, description=m.id)
            started = time.monotonic()
            if m.id in stale:
                outcomes.append(Outcome(m.id, m.area, m.file, "stale pattern", 0, "",
                                        m.breaks, m.find, m.replace))  # fmt: skip
                bar.advance(task)
                continue
            if m.tests not in baselines:
                bar.update(task, description=f"{m.id}: baseline of its tests")
                result, _, first = run_tests(copy, m.tests)
                baselines[m.tests] = (result, first)
                if result != "passed":
                    console.print(f"[red]baseline {result}[/] {' '.join(m.tests)}: {first}")
            if baselines[m.tests][0] != "passed":
                outcomes.append(Outcome(m.id, m.area, m.file, "baseline failed", 0,
                                        baselines[m.tests][1], m.breaks, m.find, m.replace))  # fmt: skip
                bar.advance(task)
                continue
            path = copy / LUA / m.file
            original = path.read_text()
            path.write_text(original.replace(m.find, m.replace, 1))
            try:
                result, _, first = run_tests(copy, m.tests)
            finally:
                path.write_text(original)
            status = {"failed": "killed", "passed": "survived"}.get(result, result)
            if status == "survived" and m.equivalent:
                status, first = "equivalent", m.equivalent
            outcomes.append(Outcome(m.id, m.area, m.file, status, time.monotonic() - started,
                                    first, m.breaks, m.find, m.replace))  # fmt: skip
            style = {"killed": "green", "survived": "red"}.get(status, "yellow")
            bar.console.print(f"[{style}]{status:9}[/] {m.id}  {first}")
            bar.advance(task)
    return outcomes


def table(outcomes: list[Outcome]) -> Table:
    t = Table(title="Lua mutants (echomq/lua), nearest tests only")
    for col in ("id", "area", "file", "status", "s", "killed by / note"):
        t.add_column(col, justify="right" if col == "s" else "left")
    for o in outcomes:
        style = {"killed": "green", "equivalent": "cyan", "survived": "bold red"}.get(
            o.status, "yellow"
        )
        t.add_row(o.id, o.area, o.file, f"[{style}]{o.status}[/]", f"{o.seconds:.0f}",
                  o.killed_by or o.breaks)  # fmt: skip
    return t


def summary(outcomes: list[Outcome]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = out.setdefault(o.area, {"total": 0})
        row["total"] += 1
        row[o.status] = row.get(o.status, 0) + 1
    return out


def write_html(path: Path, report: dict[str, Any]) -> None:
    rows = "\n".join(
        "<tr class='{s}'><td>{id}</td><td>{a}</td><td>{f}</td><td>{st}</td><td>{sec:.0f}</td>"
        "<td><code>{fi}</code><br>→ <code>{re}</code></td><td>{k}</td></tr>".format(
            s=o["status"].replace(" ", "-"),
            id=html.escape(o["id"]),
            a=html.escape(o["area"]),
            f=html.escape(o["file"]),
            st=html.escape(o["status"]),
            sec=o["seconds"],
            fi=html.escape(o["find"]),
            re=html.escape(o["replace"]) or "(deleted)",
            k=html.escape(o["killed_by"] or o["breaks"]),
        )
        for o in report["outcomes"]
    )
    sums = "".join(
        f"<li>{html.escape(a)}: {html.escape(json.dumps(c))}</li>"
        for a, c in report["summary"].items()
    )
    path.write_text(
        "<!doctype html><meta charset=utf-8><title>Lua mutants</title><style>"
        "body{font:14px sans-serif}td{border-bottom:1px solid #ddd;padding:3px 6px;"
        "vertical-align:top}.killed td:nth-child(4){color:#080}.survived{background:#fdd}"
        f"</style><h1>Lua mutants</h1><p>{html.escape(report['when'])}, "
        f"{html.escape(report['rev'])}</p><ul>{sums}</ul><table><tr><th>id<th>area<th>file"
        f"<th>status<th>s<th>mutation<th>killed by / what a survivor breaks</tr>{rows}</table>\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", nargs="*", default=[], help="mutation ids")
    ap.add_argument("--area", nargs="*", default=[], help="areas (fencing, backoff …)")
    ap.add_argument("--rev", help="mutate this revision (git archive) instead of the working tree")
    ap.add_argument("--list", action="store_true", help="print the table and exit")
    args = ap.parse_args(argv)
    if args.rev:
        args.rev = describe(args.rev)  # HEAD moves while a long run goes on
    console = Console()
    chosen = [
        m
        for m in MUTATIONS
        if (not args.only or m.id in args.only) and (not args.area or m.area in args.area)
    ]
    if args.list:
        for m in chosen:
            console.print(f"[bold]{m.id}[/] ({m.area}, {m.file}): {m.breaks}")
        return 0
    if not chosen:
        ap.error("no mutation matches")
    outcomes = run(chosen, args.rev, console)
    console.print(table(outcomes))
    rows = [asdict(o) for o in outcomes]
    if (args.only or args.area) and (OUT / "lua.json").exists():
        # a partial rerun updates its rows of the last full report and keeps the rest
        ran = {o.id for o in outcomes}
        kept = json.loads((OUT / "lua.json").read_text())["outcomes"]
        order = {m.id: i for i, m in enumerate(MUTATIONS)}
        rows = sorted(
            [r for r in kept if r["id"] not in ran and r["id"] in order] + rows,
            key=lambda r: order[r["id"]],
        )
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rev": args.rev or "working tree",
        "summary": summary([Outcome(**r) for r in rows]),
        "outcomes": rows,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "lua.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    write_html(OUT / "lua.html", report)
    console.print(f"report: {OUT / 'lua.json'}, {OUT / 'lua.html'}")
    return 0 if all(o.status in ("killed", "equivalent") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
