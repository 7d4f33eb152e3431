"""The roles' garbage-collector settings, in a fresh interpreter (they are process-wide)."""

from __future__ import annotations

import subprocess
import sys

from codemojex.collector import THRESHOLDS


def test_quiet_collector_freezes_and_raises_the_thresholds() -> None:
    code = (
        "import gc; from codemojex.collector import quiet_collector; "
        "before = gc.get_freeze_count(); quiet_collector(); "
        "print(before, gc.get_freeze_count() > before, *gc.get_threshold())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, frozen, *thresholds = out.stdout.split()
    assert before == "0" and frozen == "True"
    assert tuple(map(int, thresholds)) == THRESHOLDS
