"""What the floor's web, worker and client agree on: its keys and scripts, the secret, the
players' tokens, the console and the one clock."""

from __future__ import annotations

import sys
import time
from typing import TypeVar

from rich.console import Console

T = TypeVar("T")

console = Console() if sys.stdout.isatty() else Console(width=160)
now = time.perf_counter

QUEUE = "floor:queue"
JOBS = "floor:jobs"
SCORES = "floor:scores"
# KEYS: jobs hash, queue; ARGV: job id, job. The job is kept in a hash as the game keeps it
# in Valkey until it completes; the list carries it to a worker.
ENQUEUE = (
    "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('LPUSH', KEYS[2], ARGV[2])"
)
# KEYS: jobs hash, scores channel; ARGV: the batch's scores, then its job ids.
COMPLETE = (
    "redis.call('HDEL', KEYS[1], unpack(ARGV, 2)) return redis.call('PUBLISH', KEYS[2], ARGV[1])"
)
SECRET = ("🍎", "🍌", "🍒", "🍇")
EMOJIS = ("🍎", "🍌", "🍒", "🍇", "🍉", "🍋", "🍑", "🍍")
DRAIN_S = 15.0
WARMUP_RATE = 100.0


def token_of(player: int) -> str:
    """Both sides derive the players' tokens, so no sign-up step is needed."""
    return f"floor-{player:06d}-token"
