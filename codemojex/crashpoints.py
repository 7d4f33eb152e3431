"""Deliberate crashes at chosen points, for the reliability tests only.

Set ``CODEMOJEX_TEST_CRASH`` to ``point:probability,…`` (e.g.
``after_claim:0.05,after_commit:0.1``) and the worker SIGKILLs itself at that point with
that probability. Unset (always, outside tests) it costs one dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

POINTS = ("after_claim", "after_commit", "mid_extend")


def _parse(raw: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in raw.split(","):
        if ":" in part:
            name, _, p = part.partition(":")
            if name.strip() in POINTS:
                out[name.strip()] = float(p)
    return out


_PLAN = _parse(os.environ.get("CODEMOJEX_TEST_CRASH", ""))


def maybe_crash(point: str) -> None:
    p = _PLAN.get(point)
    if p and random.random() < p:
        os.kill(os.getpid(), signal.SIGKILL)
