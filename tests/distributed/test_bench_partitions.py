"""The partitions benchmark on a tiny configuration (its own 3-master cluster, a few hundred
jobs), so the instrument cannot rot unnoticed. Structural truths only: no figure is held to
a speed, and a phase this short may read 0 CPU ticks on a master."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console

from bench.partitions.cli import run
from bench.partitions.options import Options
from bench.partitions.report import write_html

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_every_job_is_drained_and_every_master_is_measured(tmp_path: Path) -> None:
    opts = Options(jobs=300, partitions=[1, 3], repeat=2, workers=1, progress=False)
    result = run(opts, Console(quiet=True))
    masters = result["masters"]
    assert len(masters) == 3 and len({m["pid"] for m in masters}) == 3, masters

    runs = result["runs"]
    # Interleaved: 1, 3, 1, 3.
    assert [(r["rep"], r["partitions"]) for r in runs] == [(0, 1), (0, 3), (1, 1), (1, 3)]
    for r in runs:
        assert r["completed"] == r["jobs"] == 300 and r["dead"] == 0, r
        assert sum(r["jobs_per_master"]) == 300, r
        assert 1 <= r["masters_used"] <= min(3, r["partitions"]), r
        for phase in (r["enqueue"], r["drain"]):
            assert phase["seconds"] > 0 and phase["per_s"] > 0, phase
            assert len(phase["master_ms_per_job"]) == 3, phase
            figures = [
                *phase["master_ms_per_job"],
                *phase["master_cores"],
                phase["workers_ms_per_job"],
                phase["client_ms_per_job"],
                phase["machine_cores"],
                phase["others_cores"],
            ]
            assert all(x >= 0 for x in figures), phase
        assert r["enqueue"]["workers_ms_per_job"] == 0  # no worker runs while enqueuing
        busiest, total = r["busiest_ms_per_job"], r["all_masters_ms_per_job"]
        assert busiest == max(r["master_ms_per_job"]) <= total, r
    assert [r["masters_used"] for r in runs if r["partitions"] == 1] == [1, 1]

    rows = result["rows"]
    assert [row["partitions"] for row in rows] == [1, 3]
    assert rows[0]["completed_per_s_x"] == 1.0  # the baseline against itself
    assert rows[0]["share_pct"] == [100.0, 0.0, 0.0]
    for row in rows:
        assert math.isclose(sum(row["share_pct"]), 100.0, abs_tol=1.0), row
    # The outputs render: two Markdown tables of a header, a rule and two rows each.
    assert sum(1 for line in result["table"] if line.startswith("| 3 |")) == 2
    page = tmp_path / "report.html"
    write_html(page, result)
    assert "data:image/png;base64," in page.read_text()
