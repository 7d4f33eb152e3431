"""``bench.bench_spawn`` on one round, so the instrument cannot rot: both ways start a worker
that heartbeats and stops cleanly, each is measured, and the table names both. No figure is
held to a speed."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench import bench_spawn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_worker_started_either_way_is_measured_and_printed() -> None:
    results = bench_spawn.measure(1, progress=False)
    for kind in ("exec", "fork"):
        (run,) = results[kind]
        assert run["ready_s"] > 0 and run["cpu_s"] > 0, (kind, run)
    assert results["zygote_start"]["ready_s"] > 0
    console = Console(record=True, width=200)
    console.print(bench_spawn.table(results))
    text = console.export_text()
    assert "a new process" in text and "a fork of the fork server" in text
