"""Idle cost (issue 11): an idle consumer sends at most one command a second.

Two idle consumer processes with production defaults on a private server, measured by
``INFO commandstats`` deltas (see ``tests/echomq/idle_cost.py``, which also prints the
figures for docs/reliability.md). Before: 2.6 client commands/s per idle consumer.
"""

from __future__ import annotations

import pytest

from tests.echomq.idle_cost import measure


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_an_idle_consumer_sends_at_most_one_command_a_second() -> None:
    got = measure(workers=2, window_s=12.0, settle_s=2.0)
    print(got)
    assert got["client_cmds_per_s_per_consumer"] <= 1.0, got
    # It still heartbeats and reaps (a BLPOP is counted only when it returns, so a 15 s
    # park may not show in the window; test_consumer checks that an idle consumer parks).
    assert got["script_cmds"].get("zadd", 0) >= 2, got  # heartbeats of both
    assert got["script_cmds"].get("set", 0) >= 1, got  # the reaper lock, taken and renewed
