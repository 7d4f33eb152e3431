"""A short ``codemojex mash`` with chaos against a real ``codemojex up``: nothing lost,
nothing doubled, and every kill's job scored by another worker."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from codemojex.mash import MashOptions, run_mash
from harness.running import ROOT, Up

pytestmark = pytest.mark.timeout(90)


@pytest.mark.slow
async def test_a_mash_under_chaos_loses_nothing_and_doubles_nothing(
    start_up: Callable[..., Up], tmp_path: Path
) -> None:
    # One guess at a time per worker, each taking 300 ms: a kill lands mid-score, and the
    # lane cap keeps the backlog the drain must clear small.
    up = start_up(
        "--workers", "3", "--concurrency", "1", "--score-delay-ms", "300", "--lane-cap", "15"
    )
    report = tmp_path / "report"
    result = await run_mash(
        MashOptions(
            url=up.base,
            players=8,
            mashers=2,
            duration=7,
            chaos_kill_every=2,
            admin_token=up.admin_token,
            report=report,
            seed=5,
            drain_timeout=30,
            think_s=(0.5, 1.5),
            progress=False,
        )
    )
    v = result.verdict
    assert v.ok, (v.line(), v.problems, up.logs())
    assert (v.lost, v.doubled) == (0, 0)
    assert v.kills >= 1, "chaos found no scoring worker to kill"
    # Every job a killed worker held as it died was scored by another worker (attempts >= 2);
    # a kill that landed between two scores caught nothing, and at least one caught a job.
    kills = [k.as_dict() for k in result.kills]
    print(v.line(), f"missed kills: {v.missed_kills}", *kills, sep="\n")
    assert all(k.held is not None for k in result.kills), kills
    assert v.rescued == sum(1 for k in result.kills if k.held), (v.line(), kills, v.notes)
    assert v.rescued >= 1, (v.line(), kills, v.notes)
    assert v.scored == v.accepted > 0
    assert result.ledger.by_kind["honest"] > 0 and result.ledger.by_kind["masher"] > 0
    assert result.ledger.refused["masher"] > 0, "the mashers never hit their lane cap"
    saved = json.loads((report / "results.json").read_text())
    assert saved["verdict"]["line"] == v.line()
    assert len(saved["guesses"]) == v.accepted
    assert "data:image/png;base64," in (report / "report.html").read_text()


@pytest.mark.slow
def test_the_command_prints_the_verdict_and_exits_zero(start_up: Callable[..., Up]) -> None:
    up = start_up("--workers", "1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "codemojex",
            "mash",
            "--url",
            up.base,
            "--players",
            "2",
            "--mashers",
            "1",
            "--duration",
            "2",
            "--masher-rate",
            "20",
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("lost: 0, doubled: 0, kills: 0, rescued: 0, accepted: ")


def test_chaos_without_an_admin_token_is_refused() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "codemojex",
            "mash",
            "--url",
            "http://127.0.0.1:9",
            "--chaos-kill-every",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "--admin-token" in done.stderr
