"""Branded, sortable ids: ``JOB_`` + a 26-character ULID, monotonic within a process.

Ids sort by mint time as plain strings, which lets a score-0 sorted set act as a FIFO;
within one millisecond the random part is incremented, so a process's ids never tie.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS = 80
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


class _Monotonic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_rand = 0
        self._pid = os.getpid()

    def next(self) -> str:
        with self._lock:
            if os.getpid() != self._pid:  # forked: do not share a sequence with the parent
                self._pid, self._last_ms = os.getpid(), -1
            now = time.time_ns() // 1_000_000
            if now <= self._last_ms:
                now = self._last_ms
                rand = self._last_rand + 1
                if rand > _RANDOM_MAX:  # 2^80 ids in one ms: borrow the next ms
                    now, rand = now + 1, int.from_bytes(os.urandom(10), "big") >> 1
            else:
                # Leave headroom so increments within the ms cannot overflow.
                rand = int.from_bytes(os.urandom(10), "big") >> 1
            self._last_ms, self._last_rand = now, rand
            return _encode(now, 10) + _encode(rand, 16)


_GEN = _Monotonic()


def ulid() -> str:
    """A new 26-character ULID, greater than every one this process minted before."""
    return _GEN.next()


def branded(prefix: str) -> str:
    """``PREFIX_`` + ULID, e.g. ``branded("JOB")`` -> ``JOB_01J…``."""
    return f"{prefix}_{ulid()}"


def job_id() -> str:
    return branded("JOB")


def worker_id() -> str:
    return branded("WRK")


def is_branded(value: object, prefix: str) -> bool:
    """True when ``value`` is ``PREFIX_`` followed by a well-formed ULID."""
    if not isinstance(value, str) or len(value) != len(prefix) + 27:
        return False
    if not value.startswith(prefix + "_"):
        return False
    body = value[len(prefix) + 1 :]
    return body[0] in "01234567" and all(c in _ALPHABET for c in body)


def ulid_time_ms(value: str) -> int:
    """The mint time (epoch ms) encoded in a ULID or branded id."""
    body = value[-26:][:10]
    ms = 0
    for c in body:
        ms = ms * 32 + _ALPHABET.index(c)
    return ms
