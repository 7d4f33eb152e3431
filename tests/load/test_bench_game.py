"""The game benchmark's core on a tiny configuration against a real ``codemojex up``, so the
instrument cannot rot unnoticed. Structural truths only: no figure is held to a speed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.bench_game import Options, measure, print_tables, write_html
from bench.common import machine
from tests.cli.running import Up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_every_accepted_guess_is_scored_once_and_every_process_is_measured(
    start_up: Callable[..., Up], tmp_path: Path
) -> None:
    opts = Options(
        rates=[20.0],
        duration=2.0,
        drain=20.0,
        warmup=0.5,
        players=10,
        connections=8,
        progress=False,
    )
    stopped: list[Up] = []
    rows = await measure(
        opts, lambda: start_up("--workers", "2", "--round-seconds", "600"), stopped.append
    )
    assert len(stopped) == 1
    [row] = rows
    assert row["sent"] > 0 and row["accepted"] > 0, row
    # Every accepted guess got exactly one score, on its owner's socket.
    assert row["scored"] == row["accepted"], row
    assert row["unscored"] == row["duplicate_scores"] == row["wrong_socket"] == 0, row
    assert row["unanswered"] == 0 and row["drained"], row
    assert (
        row["accepted"] + sum(row["refused"].values()) + sum(row["errors"].values()) == row["sent"]
    ), row
    # The client's own timing was measured.
    assert row["send_lag_p99_ms"] is not None and row["send_lag_p99_ms"] >= 0, row
    assert row["accept_to_score_ms"]["p50"] is not None, row
    assert row["send_to_202_ms"]["p99"] is not None, row
    # Every process of `up` was found and read, and no CPU figure is negative.
    cpu = row["cpu"]
    assert {"web", "worker", "valkey", "up", "client"} <= set(cpu["roles"]), cpu["roles"]
    assert len(cpu["workers"]) == 2, cpu["workers"]
    for p in cpu["processes"]:
        assert p["cpu_s"] >= 0 and p["ms_per_guess"] >= 0 and p["core_share"] >= 0, p
    assert cpu["others_cores"] >= 0
    # The outputs render.
    print_tables(rows, "tiny")
    page = tmp_path / "report.html"
    write_html(page, {"title": "tiny", "machine": machine(), "options": vars(opts), "rows": rows})
    assert "data:image/png;base64," in page.read_text()
