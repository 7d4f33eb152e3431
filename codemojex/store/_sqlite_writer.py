"""One score writer at a time per SQLite file, queued in the kernel instead of polled.

SQLite has one writer. A second process that finds the write lock taken waits in SQLite's
busy handler, which *sleeps and retries* (1, 2, 5, 10 … 100 ms): with two workers committing
back to back, the loser often oversleeps the holder by tens of milliseconds, and the score
write's p99 grows to hundreds of milliseconds at 2,000 guesses/s (``bench_store --latency``).

So score writers of one file first take an exclusive ``flock`` on a lock file beside it
(``<database>-scorer.lock``), and within a process an :class:`asyncio.Lock`: waiting writers
sleep in the kernel and the next one wakes the moment the lock is released. The lock is
advisory — SQLite's own locking still guarantees correctness, so other writers (players,
rounds, dead jobs) need not take it — and the kernel drops it with a process that dies.

A writer never waits for it longer than SQLite would have (the busy timeout): past that it
goes ahead without it and lets SQLite decide, so a frozen holder fails writes after the busy
timeout, as SQLite alone would, instead of blocking them forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store.db import SQLITE_BUSY_TIMEOUT_MS

__all__ = ["writer_lock"]


class _WriterLock:
    def __init__(self, path: str) -> None:
        # Never the database file itself: closing any descriptor of it would drop the
        # POSIX locks SQLite holds on it in this process.
        self.fd = os.open(f"{path}-scorer.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        # One asyncio.Lock per event loop (a lock binds to the loop it first waits on).
        self.local: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self.owner: asyncio.Task[Any] | None = None
        # A daemon thread of its own to block in: a holder that never lets go must neither
        # tie up the loop's default executor nor keep this process from exiting.
        self.requests: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        me = asyncio.current_task()
        if me is not None and self.owner is me:  # taken by our caller (GroupCommit)
            yield
            return
        loop = asyncio.get_running_loop()
        local = self.local.get(loop)
        if local is None:
            local = self.local[loop] = asyncio.Lock()
        async with local:
            locked = await self._flock(loop)
            self.owner = me
            try:
                yield
            finally:
                self.owner = None
                if locked:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)

    async def _flock(self, loop: asyncio.AbstractEventLoop) -> bool:
        """True once this process holds the flock; False after waiting the busy timeout."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        granted: asyncio.Future[None] = loop.create_future()

        def wait() -> None:  # in the thread
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                loop.call_soon_threadsafe(self._grant, granted)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                fcntl.flock(self.fd, fcntl.LOCK_UN)

        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="scorer-lock", daemon=True)
            self.thread.start()
        self.requests.put(wait)
        try:
            await asyncio.wait_for(asyncio.shield(granted), SQLITE_BUSY_TIMEOUT_MS / 1000)
        except BaseException as e:
            granted.cancel()  # given up: _grant hands the lock back when it comes
            if isinstance(e, TimeoutError):
                return False
            raise
        return True

    def _grant(self, granted: asyncio.Future[None]) -> None:
        if granted.done():
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        else:
            granted.set_result(None)

    def _serve(self) -> None:
        while True:
            self.requests.get()()


_LOCKS: dict[str, _WriterLock] = {}


def writer_lock(engine: AsyncEngine) -> contextlib.AbstractAsyncContextManager[None]:
    """Hold the score-writer lock of ``engine``'s SQLite file (a no-op for other backends,
    in-memory databases, or when the caller's task already holds it)."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:"):
        return contextlib.nullcontext()
    lock = _LOCKS.get(path)
    if lock is None:
        lock = _LOCKS[path] = _WriterLock(path)
    return lock.hold()
