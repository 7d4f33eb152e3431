"""Where the suite's CPU goes: ``uv run pytest -p tests.cpu_report`` writes one JSON line per
test (wall seconds, CPU of the test process, CPU of the child processes it waited for) to
``$CODEMOJEX_CPU_REPORT`` (default ``cpu-report.jsonl``), so the suite's time can be cut where
its work is, not where its waiting is (``--durations`` cannot tell them apart).

A child's CPU lands on the test during which it was reaped, not the one that started it. The
teardown of a worker's last test also tears down every session- and module-scoped fixture
still open (the session's Valkey, the PostgreSQL cluster, the chaos zygote, which ran for the
whole session): that teardown (its own fixtures' with them) goes on a line of its own, ``"<fixtures torn down last>"``, so
the last test of each worker does not look like the costliest of the run. A child that
outlived its parent is reaped by init and appears on no line: per-process figures need
process accounting (``accton``; see docs/testing.md)."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator
from typing import Any

import pytest

_last_teardown: dict[str, float] = {}


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _write(line: dict[str, Any]) -> None:
    with open(os.environ.get("CODEMOJEX_CPU_REPORT", "cpu-report.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")


def _now() -> dict[str, float]:
    return {
        "wall_s": time.monotonic(),
        "cpu_s": _cpu(resource.RUSAGE_SELF),
        "children_cpu_s": _cpu(resource.RUSAGE_CHILDREN),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """With no next item, this teardown closes every scope still open, wider ones included."""
    before = _now()
    yield
    if nextitem is None:
        after = _now()
        _last_teardown.update({k: after[k] - before[k] for k in after})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    started = time.time()
    before = _now()
    _last_teardown.clear()
    yield
    after = _now()
    spent = {k: after[k] - before[k] - _last_teardown.get(k, 0.0) for k in after}
    where = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "pid": os.getpid()}
    # When and where, so a timeline shows which tests ran side by side.
    _write(
        {"test": item.nodeid, "start_s": round(started, 3), **where}
        | {k: round(v, 3) for k, v in spent.items()}
    )
    if _last_teardown:
        _write(
            {"test": "<fixtures torn down last>", **where}
            | {k: round(v, 3) for k, v in _last_teardown.items()}
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write(
        {
            "test": "<session>",
            "cpu_s": round(_cpu(resource.RUSAGE_SELF), 3),
            "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN), 3),
        }
    )
