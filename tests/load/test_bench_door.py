"""The door benchmark's core on a tiny configuration against a real ``codemojex up`` (and a
real ``codemojex mash`` child), so the instrument cannot rot unnoticed. Structural truths
only: no figure is held to a speed."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from bench.common import machine
from bench.door.options import REPLAY, Options
from bench.door.rows import measure
from bench.door.tables import print_tables
from harness.running import Up

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_every_row_is_measured_and_every_accepted_guess_scored_once(
    start_up: Callable[..., Up], tmp_path: Path
) -> None:
    opts = Options(
        rows=[(0, 0), (2, 1), (REPLAY, 2)],
        duration=2.0,
        players=6,
        honest_rate=6.0,
        masher_in_flight=2,
        cost_requests=32,
        progress=False,
    )
    up = start_up("--workers", "1", "--round-seconds", "3600")
    result = await measure(opts, up, tmp_path)
    alone, mashed, replayed = result["rows"]
    for row in (alone, mashed):
        h = row["honest"]
        assert h["sent"] > 0 and h["accepted"] > 0, h
        # Every accepted honest guess got exactly one score, on its owner's socket.
        assert h["unscored"] == h["doubled"] == 0, h
        assert h["accepted"] + sum(h["not_accepted"].values()) == h["sent"], h
        assert h["send_to_score_ms"]["p99"] is not None, h
        assert {"web", "valkey", "worker1", "bench"} <= set(row["cores"]), row["cores"]
    assert alone["mashers"] is None
    # The replay loop reconnected, and each socket got its greeting.
    replay = replayed["replay"]
    assert replay["connects"] > 2 and replay["frames"] >= 2 * replay["connects"] - 2, replay
    assert replay["events_in_stream"] > 0, replay
    h = replayed["honest"]
    assert h["sent"] > 0 and h["unscored"] == h["doubled"] == 0, h
    # The mash child ran from its own address, and its verdict found nothing lost or doubled.
    assert mashed["exit"] == 0, mashed["verdict"]
    assert mashed["verdict"].startswith("lost: 0, doubled: 0"), mashed["verdict"]
    assert mashed["mashers"]["submitted"] > 0, mashed["mashers"]
    assert "mash" in mashed["cores"], mashed["cores"]
    costs = result["costs"]
    assert costs["accepted"]["count"] > 0 and costs["accepted"]["web_cpu_ms_each"] is not None
    assert costs["refused_429"]["count"] > 0, costs["refused_429"]
    assert costs["overloaded_503"]["count"] > 0, costs["overloaded_503"]
    out = io.StringIO()
    print_tables(
        {**result, "options": {"duration": opts.duration}, "machine": machine()},
        Console(file=out, width=200),
    )
    assert "× alone" in out.getvalue() and "503 overloaded" in out.getvalue()
