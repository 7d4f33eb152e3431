"""Deliberate crashes at chosen points, for the reliability tests only.

Set ``CODEMOJEX_TEST_CRASH`` to ``point:probability[:action],…`` (e.g.
``after_claim:0.05,after_commit:0.1``) and the worker SIGKILLs itself at that point with
that probability. The action ``stop`` SIGSTOPs it instead (a frozen holder: the test
SIGCONTs it later). Each hit first writes ``crashpoint <point> <action> pid <pid>`` to
stderr, so a test can count them. Unset (always, outside tests) it costs one dict lookup.

The points: ``after_claim`` (the handler has its claim, nothing written yet),
``after_commit`` (the score is committed to SQL, the job not yet completed) and
``mid_extend`` (a lease extension reached the server, the worker dies before acting on
the answer; wired in :mod:`codemojex.worker`).
"""

from __future__ import annotations

import os
import random
import signal

POINTS = ("after_claim", "after_commit", "mid_extend")
_SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}


def _parse(raw: str) -> dict[str, tuple[float, str]]:
    out: dict[str, tuple[float, str]] = {}
    for part in raw.split(","):
        name, _, rest = part.strip().partition(":")
        p, _, action = rest.partition(":")
        if name in POINTS and p:
            out[name] = (float(p), action.strip().lower() or "kill")
    return out


_PLAN = _parse(os.environ.get("CODEMOJEX_TEST_CRASH", ""))


def reload() -> None:
    """Re-read ``CODEMOJEX_TEST_CRASH`` (a process forked after import sets its own)."""
    global _PLAN
    _PLAN = _parse(os.environ.get("CODEMOJEX_TEST_CRASH", ""))


def armed(point: str) -> bool:
    """True when ``point`` may fire in this process."""
    return _PLAN.get(point, (0.0, ""))[0] > 0


def maybe_crash(point: str) -> None:
    plan = _PLAN.get(point)
    if plan and random.random() < plan[0]:
        action = plan[1] if plan[1] in _SIGNALS else "kill"
        os.write(2, f"crashpoint {point} {action} pid {os.getpid()}\n".encode())
        os.kill(os.getpid(), _SIGNALS[action])
