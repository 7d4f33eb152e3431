"""The fence benchmark's core on a tiny configuration, so the instrument cannot rot: both
variants run every job through, and the figures come out. No figure is held to a speed."""

from __future__ import annotations

from typing import Any

import echomq
from bench.bench_fence import lifecycle, measure, report


async def test_both_variants_complete_every_job_and_report(
    redis_conn: Any, queue_name: str
) -> None:
    for fence in (False, True):
        await lifecycle(redis_conn, f"{queue_name}{int(fence)}", 40, fence)
        s = await echomq.Queue(redis_conn, f"{queue_name}{int(fence)}").stats()
        assert s["counters"]["completed"] == 40 and s["pending"] == s["active"] == 0


async def test_the_report_has_a_figure_per_repetition(valkey_url: str) -> None:
    figures = await measure(valkey_url, 30, 2, progress=False)
    assert [len(figures[f]) for f in (False, True)] == [2, 2]
    assert all(x >= 0 for x in figures[False] + figures[True])
    assert "ratio with ÷ without" in report(figures)
