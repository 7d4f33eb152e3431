"""The server never outlives us: ``PR_SET_PDEATHSIG`` at spawn, and a stop at exit."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import weakref
from collections.abc import Callable
from typing import Protocol

_PR_SET_PDEATHSIG = 1


class _Stoppable(Protocol):
    def stop(self, timeout: float = 5.0) -> None: ...


live_servers: weakref.WeakSet[_Stoppable] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    for server in list(live_servers):
        # One server that fails to stop must not keep the others alive.
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            server.stop(timeout=5.0)


atexit.register(_stop_all_at_exit)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGTERM the child when we die, or None off Linux.

    ``prctl`` is resolved here, in the parent, so the forked child runs no dlopen/dlsym. The
    signal fires when the *thread* that forked exits: start the server from a thread that
    outlives it (the main thread, not a short-lived executor thread).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        # The parent may have died between fork and prctl; then nobody would signal us.
        if os.getppid() != parent:
            os._exit(1)

    return preexec
