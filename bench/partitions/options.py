"""What a partitions run is asked for, and the masters it measures."""

from __future__ import annotations

from dataclasses import dataclass, field

LANES = 300
ENQUEUE_AT_ONCE = 100
POLL_S = 0.05  # the drain's stats poll: ~20 small scripts a second per partition


@dataclass
class Options:
    jobs: int = 20_000
    partitions: list[int] = field(default_factory=lambda: [1, 3, 6])
    repeat: int = 3
    workers: int = 2
    concurrency: int = 32
    name: str = "guesses"
    appendfsync: str = "always"
    progress: bool = True


@dataclass(frozen=True)
class Master:
    port: int
    pid: int
    slots: str  # "0-5460"
