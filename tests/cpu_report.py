"""Where the suite's CPU goes: ``uv run pytest -p tests.cpu_report`` writes one JSON line per
test (wall seconds, CPU of the test process, CPU of the child processes it waited for) to
``$CODEMOJEX_CPU_REPORT`` (default ``cpu-report.jsonl``), so the suite's time can be cut where
its work is, not where its waiting is (``--durations`` cannot tell them apart)."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator
from typing import Any

import pytest


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    wall, own, kids = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    line = {
        "test": item.nodeid,
        # When and where, so a timeline shows which tests ran side by side.
        "start_s": round(time.time() - (time.monotonic() - wall), 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "pid": os.getpid(),
        "wall_s": round(time.monotonic() - wall, 3),
        "cpu_s": round(_cpu(resource.RUSAGE_SELF) - own, 3),
        "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - kids, 3),
    }
    with open(os.environ.get("CODEMOJEX_CPU_REPORT", "cpu-report.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")


def pytest_sessionfinish(session: pytest.Session) -> None:
    line = {
        "test": "<session>",
        "cpu_s": round(_cpu(resource.RUSAGE_SELF), 3),
        "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN), 3),
    }
    with open(os.environ.get("CODEMOJEX_CPU_REPORT", "cpu-report.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\n")
