"""``bench.bench_time`` on a tiny configuration, so the instrument cannot rot: every mode
claims every job it enqueued, each figure is measured, and the table names each ratio. No
figure is held to a speed."""

from __future__ import annotations

import asyncio

import pytest
from rich.console import Console

from bench import bench_time
from bench.common import embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_every_mode_is_measured_and_the_table_names_each_ratio() -> None:
    with embedded_server("no") as server:
        out = asyncio.run(bench_time.measure(server.url, jobs=60, rounds=1, idle_s=0.5))
    assert set(out["claims"]) == set(bench_time.MODES)
    for figures in out["claims"].values():
        assert figures["script_us"] > 0 and figures["wall_us"] > 0
        assert figures["valkey_cpu_us"] >= 0
    assert set(out["ratios"]) == {"priority", "delayed"}
    assert set(out["idle_cmds_per_s"]) == {"unpaused", "paused"}
    console = Console(record=True, width=200)
    console.print(bench_time.table(out))
    text = console.export_text()
    assert "priority × plain" in text and "delayed × plain" in text and "paused" in text
