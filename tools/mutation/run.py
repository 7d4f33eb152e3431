"""Mutation testing of the Python core with mutmut, one module group at a time.

    uv run python -m tools.mutation.run                  # every group
    uv run python -m tools.mutation.run hub scores       # some groups
    uv run python -m tools.mutation.run --focus hub      # only the guarded functions
    uv run python -m tools.mutation.run --list           # the groups and their tests

Each group maps source modules to the tests nearest them (``GROUPS``): mutmut first runs
those tests once, recording which test executes which function, then runs each mutant
against only the tests that reach the mutated function. A run never uses the whole suite
(7 min); it never touches the checkout either: it works in a copy under
``/tmp/codemojex-mutation/<group>`` (see ``tree.py``), where mutmut's settings are
written into the copy's ``pyproject.toml`` (the real one has none, so a stray
``mutmut run`` in the checkout does not start a whole-tree run).

The report: a table per module (total, killed, survived, timeout, no tests) and every
survivor's diff, in ``tools/mutation/out/mutmut.json`` (merged across runs by group) and
on the terminal. Not part of ``uv run pytest``: docs/testing.md has the figures.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tools.mutation.tree import OUT, ROOT, copy_tree, describe

WORK = Path("/tmp/codemojex-mutation")


@dataclass(frozen=True)
class Group:
    modules: tuple[str, ...]  # files mutated
    tests: tuple[str, ...]  # the nearest tests: the only ones any mutant of the group runs
    what: str
    # --focus: only the mutants of these functions (mutmut name globs), the ones that
    # guard fencing, scoring, lane order, owner filtering and backoff; () = all of them
    focus: tuple[str, ...] = ()
    # Tests left out of the group's runs, each with its reason in a comment where it is set.
    deselect: tuple[str, ...] = ()
    # mutmut settings of this group only (e.g. its process isolation), over BASE's
    settings: tuple[tuple[str, str], ...] = ()


def _rest_of(package: str, *elsewhere: str) -> tuple[str, ...]:
    """Every module of ``package`` not in another group: a new module is mutated (and
    reported, with "no tests" until its tests join the group) without editing this table."""
    skip = {*elsewhere, "__init__.py", "settings.py"}  # the last two: no functions to mutate
    return tuple(
        f"{package}/{p.name}" for p in sorted((ROOT / package).glob("*.py")) if p.name not in skip
    )


_RATE_BURST_TEST = (
    "tests/echomq/test_admission.py::"
    "test_the_rate_limit_allows_a_burst_then_refills_on_the_server_clock"
)

# The Consumer and the parts it is built of: the echomq.consumer subpackage.
_CONSUMER = _rest_of("echomq/consumer")
# The embedded server: the echomq.server subpackage.
_SERVER = _rest_of("echomq/server")

GROUPS: dict[str, Group] = {
    "rules": Group(
        ("codemojex/rules.py",),
        ("tests/unit/test_rules.py",),
        "scoring rules: feedback, points, validation",
        (
            "codemojex.rules.x_feedback*",
            "codemojex.rules.x_points_for*",
            "codemojex.rules.x_round_points*",
        ),
    ),
    "guesses": Group(
        ("codemojex/guesses.py",),
        ("tests/game/test_admission.py", "tests/web/test_admission.py"),
        "guess submission: validate, mint, enqueue",
    ),
    "scores": Group(
        ("codemojex/store/scores.py",),
        (
            "tests/migrations/test_scores_idempotent.py",
            "tests/migrations/test_scores_batched.py",
            "tests/migrations/test_scores_reads.py",
        ),
        "scoring writes: idempotent, best per round",
        # The SQL of each dialect is built once (functools.cache on _statements): forked
        # from mutmut's main process, which ran the tests already, a mutant would find the
        # cache full and never run. A fork server forks from a process that only collected.
        settings=(("process_isolation", "forkserver"),),
    ),
    "hub": Group(
        ("web/hub.py", "web/messages.py", "web/sockets.py", "web/replay.py"),
        (
            "tests/web/test_ws.py",
            "tests/web/test_ws_contract.py",
            "tests/web/test_admission.py",
            "tests/web/test_replay_budget.py",
            "tests/web/test_hub_fanout.py",
        ),
        "owner filtering: replay and push per player",
        (
            "web.replay.xǁReplaysǁreplay*",
            "web.hub.xǁHubǁ_on_guess_event*",
            "web.messages.x_score_message*",
            "web.hub.xǁHubǁjoin*",
            "web.sockets.xǁSocketsǁjoin*",
            "web.sockets.xǁSocketsǁleave*",
            "web.hub.xǁHubǁoffer*",
        ),
    ),
    "echomq": Group(
        _rest_of("echomq", "backoff.py"),
        (
            "tests/echomq/test_transitions.py",
            "tests/echomq/test_arguments.py",
            "tests/echomq/test_admission.py",
            "tests/echomq/test_fair_order.py",
            "tests/echomq/test_faults.py",
            "tests/echomq/test_call_edges.py",
            "tests/echomq/test_backoff_edges.py",
            "tests/echomq/test_reap_ownership.py",
            "tests/echomq/test_scripts.py",
            "tests/echomq/test_codes.py",
        ),
        "fencing, backoff and lane order as the client calls them",
        (  # the fenced calls, the backoff's arguments, the claims' order, the reaper
            "echomq.jobs.xǁJobsǁcomplete*",
            "echomq.jobs.xǁJobsǁ_complete_call*",
            "echomq.jobs.xǁJobsǁextend*",
            "echomq.jobs.xǁJobsǁ_extend_call*",
            "echomq.jobs.xǁJobsǁfail*",
            "echomq.jobs.xǁJobsǁrelease*",
            "echomq.codes.xrefuse*",  # the refusal codes -> errors (retry_dead, discard, submit)
            "echomq.codes.xǁRefusalǁbuild*",
            "echomq.jobs.xǁJobsǁclaim*",
            "echomq.jobs.x_check_claim*",
            "echomq.jobs.x_decode_batch*",
            "echomq.lanes.xǁLanesǁclaim*",
            "echomq.stalled.xǁStalledǁreap*",
        ),
        # A burst of 3 at 20/s must be spent within 50 ms: under mutmut's tracing on a busy
        # machine it is not, and a red clean run stops the whole group.
        (_RATE_BURST_TEST,),
    ),
    "backoff": Group(
        ("echomq/backoff.py",),
        ("tests/unit/test_backoff.py",),
        "the client-side backoff of every reconnect loop (doubling, cap, jitter)",
    ),
    "consumer": Group(
        _CONSUMER,
        (
            "tests/echomq/test_consumer.py",
            "tests/echomq/test_consumer_faults.py",
            "tests/echomq/test_reaper_lock.py",
            "tests/echomq/test_claims.py",
            "tests/echomq/test_options.py",
            "tests/echomq/test_consumer_parts.py",
        ),
        "the consumer and its parts: claim, extend, complete, release, beat, reap",
    ),
    "server": Group(
        _SERVER,
        ("tests/echomq/test_server.py",),
        "EmbeddedValkey: start, stop, config",
    ),
}

# Survivors no test can kill: no reachable behaviour differs. Reported as "equivalent",
# not "survived". mutmut numbers mutants per function, so an edit to one of these functions
# may renumber them: a stale entry then matches nothing and the mutant shows as survived.
EQUIVALENT: dict[str, str] = {
    **dict.fromkeys(
        (f"codemojex.rules.x_feedback__mutmut_{n}" for n in (8, 11, 12)),
        "zip's strictness: the lengths were checked equal on the line before",
    ),
    "web.hub.xǁHubǁoffer__mutmut_3": (
        "`evicted or mine` for `evicted and mine`: offer() fails only once evicted is set"
    ),
    "web.replay.xǁReplaysǁreplay__mutmut_15": (
        "page = budget + 2: one event more read before the same decision"
    ),
    "echomq.jobs.xǁJobsǁfail__mutmut_37": (
        "-2 for -1 as 'no delay given': fail.lua reads any negative delay as backoff"
    ),
    "echomq.stalled.xǁStalledǁreap__mutmut_20": (
        "lock_ms 1 for 0 without a reaper id: reap.lua reads lock_ms only with one"
    ),
    "echomq.stalled.xǁStalledǁreap__mutmut_21": (
        "horizon_ms 1 for 0: it shapes only the wait reported, which reap() drops"
    ),
    "echomq.jobs.x_decode_batch__mutmut_17": (
        "next due 0 read as none: 0 is 1970-01-01, never a due time on the server clock"
    ),
    "codemojex.store.scores.x__best_per_round__mutmut_8": (
        "<= for <: equal keys (points, seq, job id) are the same job's record"
    ),
    **dict.fromkeys(
        (f"codemojex.store.scores.xǁ_Statementsǁ_pack__mutmut_{n}" for n in (3, 5, 6)),
        "zip's strictness: every row of a batch has the same columns",
    ),
    "codemojex.store.scores.x__sqlite_statements__mutmut_12": (
        "columnar None for False: only its truth is read"
    ),
}

# A survivor whose only change is the text of an error (the message given to a raised
# exception, or the argument name that `echomq.checks` puts in its message) changes no
# behaviour the contract states: the same exception type is raised either way. Such
# survivors are reported as equivalent ("message text") instead of being listed one by one.
_RAISE = re.compile(r"^\s*raise (\w+)\(")
_CHECK = re.compile(r"checks\.(\w+)\((?:\"\w+\"|None), ")


def message_only(diff: str) -> bool:
    lines = diff.splitlines()
    if len(lines) != 2 or not (lines[0].startswith("-") and lines[1].startswith("+")):
        return False
    old, new = lines[0][1:], lines[1][1:]
    raised = _RAISE.match(old), _RAISE.match(new)
    if raised[0] and raised[1]:
        # one argument only: an exception built from several (LaneFull(lane, limit)) carries
        # them as attributes callers read, which is behaviour, not text
        arg = re.sub(r'"[^"]*"', "", old[raised[0].end() : old.rstrip().rfind(")")])
        return raised[0].group(1) == raised[1].group(1) and "," not in arg
    # the same line once every checks.X("name", … is read as checks.X(_, …
    return old != new and _CHECK.sub(r"checks.\1(_, ", old) == _CHECK.sub(r"checks.\1(_, ", new)


_SQL = re.compile(
    r"\b(select|insert|update|delete|conflict|returning|values|from|where|begin|commit|"
    r"text|int4|int8|bool|unnest)\b",
    re.IGNORECASE,
)


def sql_case_only(diff: str) -> bool:
    """A change of letter case only, in a line of SQL: keywords, unquoted identifiers and
    type names are case-insensitive in SQLite and PostgreSQL alike."""
    lines = diff.splitlines()
    if len(lines) != 2 or not (lines[0].startswith("-") and lines[1].startswith("+")):
        return False
    old, new = lines[0][1:], lines[1][1:]
    return old != new and old.lower() == new.lower() and bool(_SQL.search(old))


# Shared by every group; `only_mutate` and the test selection are added per group.
BASE: dict[str, Any] = {
    # All three packages are copied into mutants/ so the tests import them from there and
    # never from the editable install's checkout; only the group's modules get mutants.
    "source_paths": ["echomq", "codemojex", "web"],
    "also_copy": ["migrations", "alembic.ini", "bench"],
    "use_git_change_detection": False,
    "pytest_add_cli_args": ["--timeout=120"],
}

STATUS = {  # mutmut's exit codes, as its stats module reads them
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "type check",
    None: "not checked",
}
COLUMNS = ("killed", "survived", "equivalent", "timeout", "no tests")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    return json.dumps(v)


def configure(copy: Path, group: Group) -> None:
    """Append a [tool.mutmut] table for ``group`` to the copy's pyproject.toml."""
    settings = dict(BASE)
    settings["only_mutate"] = list(group.modules)
    settings["pytest_add_cli_args_test_selection"] = list(group.tests)
    settings.update(group.settings)
    settings["pytest_add_cli_args"] = [
        *settings["pytest_add_cli_args"],
        *(f"--deselect={t}" for t in group.deselect),
    ]
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    assert "[tool.mutmut]" not in text, "pyproject.toml has its own [tool.mutmut]"
    lines = ["", "[tool.mutmut]"] + [f"{k} = {_toml_value(v)}" for k, v in settings.items()]
    pyproject.write_text(text + "\n".join(lines) + "\n")
    tomllib.loads(pyproject.read_text())  # a typo here fails now, not inside mutmut


def verdicts(copy: Path) -> dict[str, int | None]:
    """Every mutant's exit code so far (None: not run yet), from mutmut's meta files."""
    out: dict[str, int | None] = {}
    for meta in (copy / "mutants").rglob("*.py.meta"):
        try:
            out.update(json.loads(meta.read_text())["exit_code_by_key"])
        except (OSError, ValueError, KeyError):
            continue  # being rewritten right now: read it on the next poll
    return out


def module_of(mutant: str) -> str:
    """``echomq.jobs.xǁJobsǁcomplete__mutmut_3`` -> ``echomq/jobs.py``."""
    dotted = mutant.split(".x")[0] if ".x" in mutant else mutant.rsplit(".", 1)[0]
    return dotted.replace(".", "/") + ".py"


def diff_of(copy: Path, mutant: str) -> str:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("mutmut")), "show", mutant],
        check=False,
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [
        ln
        for ln in done.stdout.splitlines()
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    return "\n".join(lines)


def run_group(
    name: str, group: Group, args: argparse.Namespace, console: Console
) -> dict[str, Any]:
    copy = WORK / name
    if args.report:
        return summarise(name, group, args, copy, None, 0.0, "")
    if not (args.resume and (copy / "mutants").is_dir()):
        copy_tree(copy, args.rev)
        configure(copy, group)
        (copy / ".mutation-rev").write_text(args.rev or "working tree")  # for --resume
    globs = args.mutants or (list(group.focus) if args.focus else [])
    log = OUT / f"mutmut-{name}.log"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", str(Path(sys.executable).with_name("mutmut")), "run"]
            + ["--max-children", str(args.children), *globs],
            cwd=copy,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        with Progress(
            TextColumn(f"[bold]{name}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
        ) as bar:
            task = bar.add_task("collecting test stats", total=None)
            while proc.poll() is None:
                if time.monotonic() - started > args.limit:
                    proc.terminate()
                    proc.wait(30)
                    break
                seen = verdicts(copy)
                if seen:
                    done = sum(v is not None for v in seen.values())
                    tally = Counter(STATUS.get(v, "other") for v in seen.values() if v is not None)
                    bar.update(
                        task,
                        total=len(seen),
                        completed=done,
                        description=" ".join(f"{k} {tally[k]}" for k in COLUMNS if tally[k]),
                    )
                time.sleep(2)
    return summarise(name, group, args, copy, proc.returncode, time.monotonic() - started, str(log))


def summarise(
    name: str,
    group: Group,
    args: argparse.Namespace,
    copy: Path,
    exit_code: int | None,
    seconds: float,
    log: str,
) -> dict[str, Any]:
    """The group's verdicts so far, per module, with every survivor's diff."""
    globs = args.mutants or (list(group.focus) if args.focus else [])
    seen = verdicts(copy)
    rows: dict[str, Counter[str]] = {}
    checked: Counter[str] = Counter()
    survivors = []
    for mutant, code in sorted(seen.items()):
        if globs and not any(fnmatch.fnmatch(mutant, g) for g in globs):
            continue
        status = STATUS.get(code, f"other ({code})")
        entry: dict[str, str] = {}
        if status == "survived":
            entry = {"mutant": mutant, "diff": diff_of(copy, mutant)}
            if mutant in EQUIVALENT:
                status, entry["equivalent"] = "equivalent", EQUIVALENT[mutant]
            elif message_only(entry["diff"]):
                status, entry["equivalent"] = "equivalent", "message text"
            elif sql_case_only(entry["diff"]):
                status, entry["equivalent"] = "equivalent", "SQL is case-insensitive"
            survivors.append(entry)
        rows.setdefault(module_of(mutant), Counter())[status] += 1
        checked[status] += 1
    return {
        "group": name,
        "what": group.what,
        "tests": list(group.tests),
        "rev": rev.read_text() if (rev := copy / ".mutation-rev").exists() else args.rev,
        "focus": globs,
        # a report-only pass: finished when every mutant in scope has its verdict
        "finished": exit_code == 0 if exit_code is not None else not checked["not checked"],
        "exit_code": exit_code,
        "log": log,
        "seconds": round(seconds, 1),
        "modules": {m: {"total": sum(c.values()), **dict(c)} for m, c in rows.items()},
        "survivors": survivors,
    }


def table(results: list[dict[str, Any]]) -> Table:
    t = Table(title="mutmut: mutants per module (nearest tests only)")
    for col in ("group", "module", "total", *COLUMNS, "other", "s"):
        t.add_column(col, justify="left" if col in ("group", "module") else "right")
    for r in results:
        for module, c in sorted(r["modules"].items()):
            other = c["total"] - sum(c.get(k, 0) for k in COLUMNS)
            t.add_row(
                r["group"],
                module,
                str(c["total"]),
                *(str(c.get(k, 0)) for k in COLUMNS),
                str(other),
                f"{r['seconds']:.0f}" + ("" if r["finished"] else " (cut)"),
            )
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("groups", nargs="*", help=f"groups to run (default all): {', '.join(GROUPS)}")
    ap.add_argument("--rev", help="mutate this revision (git archive) instead of the working tree")
    ap.add_argument("--children", type=int, default=2, help="mutants tested in parallel")
    ap.add_argument("--limit", type=float, default=3600, help="seconds per group before it is cut")
    ap.add_argument("--focus", action="store_true", help="only each group's guarded functions")
    ap.add_argument("--resume", action="store_true", help="reuse the last copy and its verdicts")
    ap.add_argument("--report", action="store_true", help="only report the last run's verdicts")
    ap.add_argument(
        "--mutants",
        nargs="+",
        help="only these mutants (names or globs), e.g. a rerun of survivors",
    )
    ap.add_argument("--list", action="store_true", help="print the groups and exit")
    args = ap.parse_args(argv)
    if args.rev:
        args.rev = describe(args.rev)  # HEAD moves while a long run goes on
    console = Console()
    if args.list:
        for name, g in GROUPS.items():
            console.print(f"[bold]{name}[/]: {g.what}\n  mutates {', '.join(g.modules)}")
            console.print(f"  tests   {' '.join(g.tests)}")
            if g.focus:
                console.print(f"  focus   {' '.join(g.focus)}")
        return 0
    unknown = set(args.groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown groups: {', '.join(sorted(unknown))}")
    OUT.mkdir(exist_ok=True)
    report_path = OUT / "mutmut.json"
    results = []
    for name in args.groups or list(GROUPS):
        r = run_group(name, GROUPS[name], args, console)
        results.append(r)
        # re-read: another run (another group) may have written it meanwhile
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        if args.report and name in report:  # keep the measured run's time and exit code
            r.update({k: report[name][k] for k in ("seconds", "exit_code", "log", "rev")})
        report[name] = r
        report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        (OUT / f"mutmut-{name}.json").write_text(json.dumps(r, indent=2, ensure_ascii=False) + "\n")
        for s in r["survivors"]:
            kind = "equivalent" if "equivalent" in s else "survived"
            console.print(f"[yellow]{kind}[/] {s['mutant']}\n{s['diff']}")
        if not r["finished"]:
            console.print(f"[red]{name}: mutmut exited {r['exit_code']}[/]; log {r['log']}")
    console.print(table(results))
    console.print(f"report: {report_path}")
    return 0 if all(r["finished"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
