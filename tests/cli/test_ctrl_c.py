"""Ctrl-C on ``uv run codemojex up``: the terminal sends SIGINT to the whole foreground group
and ``uv run`` forwards the one it gets to its child, so the supervisor sees one keystroke
twice within milliseconds. That is one clean stop (the worker finishes or hands back the
guess it is scoring); only a second Ctrl-C, a moment later, skips the wait."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import pytest

from harness.running import Up, wait_until
from tests.cli.test_up import client, new_player, submit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _interrupt_while_scoring(up: Up, gap_s: float) -> int:
    """Two SIGINTs ``gap_s`` apart while the worker scores a guess (3 s each); the exit code."""
    with client(up) as http:
        token = new_player(http, "ctrl-c")
        [job] = submit(http, token, 1)
        auth = {"Authorization": f"Bearer {token}"}
        wait_until(
            lambda: http.get(f"/api/guesses/{job}", headers=auth).json()["state"] == "active",
            20,
            "the guess to be claimed",
            logs=up.logs,
        )
    assert up.proc is not None
    up.track()
    up.proc.send_signal(signal.SIGINT)
    time.sleep(gap_s)
    up.proc.send_signal(signal.SIGINT)
    # The supervisor's own bound: 15 s of grace, 5 s for each SIGKILLed child, 3 s of
    # goodbyes, 5 s for Valkey. CI once saw no exit within 30 s (no logs were kept then).
    try:
        return up.proc.wait(45)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"up did not stop within 45 s of Ctrl-C\n{up.logs()}") from None


def test_one_ctrl_c_delivered_twice_is_one_clean_stop(start_up: Callable[..., Up]) -> None:
    up = start_up("--workers", "1", "--score-delay-ms", "3000")
    assert _interrupt_while_scoring(up, 0.01) == 0, up.logs()
    logs = up.logs()
    assert "second signal" not in logs and "did not stop in time" not in logs, logs


def test_a_second_ctrl_c_a_moment_later_skips_the_wait(start_up: Callable[..., Up]) -> None:
    up = start_up("--workers", "1", "--score-delay-ms", "3000")
    assert _interrupt_while_scoring(up, 1.0) == 0, up.logs()
    assert "second signal: killing every child now" in up.logs(), up.logs()
