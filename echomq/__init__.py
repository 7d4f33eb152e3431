"""EchoMQ: a reliable job queue on Valkey. It knows nothing of games.

The front door holds what a producer, a handler and a consumer write; the rest is in
documented submodules (``echomq.errors``, ``echomq.types``, ``echomq.ids``,
``echomq.connection``, ``echomq.scripts``, ``echomq.server``, ``echomq.admin``, ...).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .connection import connect
from .consumer import Consumer, Handler
from .errors import (
    DeadlinePassed,
    DedupConflict,
    EchoMQError,
    InvalidState,
    JobNotFound,
    LaneFull,
    NotReplicated,
    RateLimited,
    Retry,
    Unavailable,
)
from .events import Tail
from .hooks import Hooks
from .lanes import Dedup
from .partitions import Partitioned, PartitionedConsumer
from .queue import Queue
from .settings import Settings
from .types import Claim, Enqueued, Event, JobInfo, Token

try:
    __version__ = _version("echomq")  # one home: echomq/pyproject.toml
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Claim",
    "Consumer",
    "DeadlinePassed",
    "Dedup",
    "DedupConflict",
    "EchoMQError",
    "Enqueued",
    "Event",
    "Handler",
    "Hooks",
    "InvalidState",
    "JobInfo",
    "JobNotFound",
    "LaneFull",
    "NotReplicated",
    "Partitioned",
    "PartitionedConsumer",
    "Queue",
    "RateLimited",
    "Retry",
    "Settings",
    "Tail",
    "Token",
    "Unavailable",
    "connect",
]
