"""bench.bench_turns on a tiny run: every mode parses each honest request once (it raises
otherwise) and prints its figures."""

from __future__ import annotations

import subprocess
import sys

import pytest
import uvloop

from bench.bench_turns import _run


@pytest.mark.parametrize("mode", ["at-once", "light", "gang"])
def test_each_mode_parses_every_request(mode: str) -> None:
    assert uvloop.run(_run(mode, 1_000)) > 0


def test_the_command_prints_its_figures() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_turns", "--requests", "500", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "at-once" in out and "over at once" in out
