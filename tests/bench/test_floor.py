"""``bench.bench_floor`` on a tiny configuration, so the instrument cannot rot: every guess
sent is accepted and scored exactly once, and every role's CPU is read. No figure is held to
a speed."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench.floor.cli import parse
from bench.floor.run import measure, print_table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def test_every_guess_is_accepted_and_scored_and_every_figure_is_read() -> None:
    opts = parse(
        ["--rates", "100", "--duration", "2", "--warmup", "0.5", "--players", "5", "--workers", "1"]
        + ["--quiet"]
    )
    result = measure(opts)
    (row,) = result["rows"]
    assert row["sent"] > 0
    assert row["accepted"] == row["sent"] == row["scored"]
    assert row["refused_or_failed"] == 0 and row["duplicate_scores"] == 0 and row["drained"]
    assert row["accepted_per_s"] > 0 and row["scored_per_s"] > 0
    assert 0 < row["accept_to_score_ms"]["p50"] <= row["accept_to_score_ms"]["p99"]
    for role in ("web", "worker", "valkey", "client"):
        assert row["cpu"][role]["ms_per_guess"] > 0, role
    assert row["server_ms_per_guess"] > 0 and row["jobs_per_batch"] >= 1
    console = Console(record=True, width=200)
    print_table(result["rows"], "floor", console)
    text = console.export_text()
    assert "100/s" in text and "server" in text
