"""What a run of the game benchmark is asked for, and what every part of it shares: the
console, the client's one clock, the figures' thresholds."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from rich.console import Console

console = Console() if sys.stdout.isatty() else Console(width=200)
now = time.perf_counter  # every client timestamp: one monotonic clock

LAG_OK_MS = 5.0  # a client whose send lag p99 passes this did not offer the load asked for
SCORED_OK = 0.95  # scored/s must reach this share of offered/s


@dataclass
class Options:
    rates: list[float] = field(default_factory=lambda: [100.0, 300.0, 1000.0, 2000.0])
    duration: float = 10.0
    drain: float = 30.0  # seconds to wait after the load for every accepted guess's score
    warmup: float = 2.0  # seconds at a low rate before the first window, not recorded
    players: int = 200
    connections: int = 64
    schedule: str = "poisson"  # or "uniform"
    pick: str = "round-robin"  # or "random"
    seed: int = 1
    fresh_each_rate: bool = False
    progress: bool = True
    watchers: int = 0  # extra players whose sockets only read (bench/watchers/)
    watcher_processes: int = 0  # 0: one per 5,000 watchers, at most 2
    watcher_concurrency: int = 64  # sockets being opened at once
    via: str = "http"  # or "socket": each guess a frame on its player's websocket


WATCHERS_PER_PROCESS = 5_000


def watcher_processes(opts: Options) -> int:
    if opts.watcher_processes > 0:
        return opts.watcher_processes
    return max(1, min(2, math.ceil(opts.watchers / WATCHERS_PER_PROCESS)))


def up_env(opts: Options, crowd: bool | None = None) -> dict[str, str]:
    """``CODEMOJEX_*`` variables for ``up``: a crowd needs the per-address limits lifted
    (every watcher signs up and connects from 127.0.0.1) and no per-process socket cap.
    ``crowd`` (default: ``opts.watchers`` is not 0) asks for them without one, so that a
    configuration with 0 watchers runs the same server as the one with a crowd it is
    compared with. A variable a server does not know is ignored (an older ``--baseline``
    has fewer)."""
    if not (opts.watchers > 0 if crowd is None else crowd):
        return {}
    return {
        "CODEMOJEX_PLAYER_RATE": "0",
        "CODEMOJEX_SOCKETS_PER_PROCESS": "0",
        "CODEMOJEX_SOCKETS_PER_ADDRESS": "0",
        "CODEMOJEX_CONNECTIONS_PER_ADDRESS": "0",
        # the watchers' handshakes count at the door beside the load's guesses
        "CODEMOJEX_ADDRESS_IN_FLIGHT": "0",
    }
