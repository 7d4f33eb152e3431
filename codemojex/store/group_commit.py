"""Group commit: many concurrent score writes, one SQL transaction per batch.

    group = GroupCommit(engine)
    wrote = await group.write(record)   # True iff this write was the first for its JOB id
    await group.close()                 # waits for what is in flight; later writes refuse

Every handler of a ScoreWorker awaits :meth:`GroupCommit.write`. One flusher task takes
everything pending (up to ``max_batch``), writes it with :func:`record_scores` in ONE
transaction, and resolves each waiter; what arrives while a batch is in flight goes in the
next. So a batch is as big as the writes that piled up during the previous commit: one
writer gets a batch of one and no added latency, many writers share one fsync and one
round of statements. With ``linger_ms``, a batch also waits until its oldest record is
that old (unless it is full), so at a rate where commits would carry one record each they
carry what arrives within the linger, for that much more latency. On SQLite the flusher
takes its batch only once the file's score writer lock is its own (see ``_sqlite_writer``),
so time spent waiting for another process's commit grows the batch instead of idling it.
The flusher exists only while there is work, so a group that is never closed leaves no task
behind.

Guarantees:

- A waiter is resolved only after its record's transaction committed (or failed): a job
  may be completed once ``write`` returned, never before.
- If a batch fails, every waiter of that batch gets the exception (EchoMQ then fails each
  job and retries it with backoff). One exception: an integrity error (a foreign key, a
  bad value) belongs to one record, not to its batch-mates, so the batch is then written
  again one record per transaction and only the offending record's waiter gets it — a
  poison guess must not use up the attempts of every guess that shared its batch.
- A cancelled waiter leaves the batch alone: if its record is already in flight, it is
  written and the result is dropped; if it is still pending, it is not written.
- Within one batch the first write of a JOB id wins, as across batches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex.store._sqlite_writer import writer_lock
from codemojex.store.records import ScoreRecord
from codemojex.store.scores import record_scores

__all__ = ["DEFAULT_MAX_BATCH", "GroupCommit", "GroupCommitClosed"]

DEFAULT_MAX_BATCH = 256

_Waiter = tuple[ScoreRecord, "asyncio.Future[bool]"]


class GroupCommitClosed(RuntimeError):
    """``write`` after ``close``: the group takes no more records."""


class GroupCommit:
    """A commit coalescer over :func:`record_scores` (see the module docstring)."""

    def __init__(
        self, engine: AsyncEngine, max_batch: int = DEFAULT_MAX_BATCH, *, linger_ms: float = 0
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if linger_ms < 0:
            raise ValueError("linger_ms must be >= 0")
        self.engine = engine
        self.max_batch = max_batch
        self.linger_s = linger_ms / 1000
        self._since = 0.0  # when the oldest pending record arrived (loop clock)
        self._pending: list[_Waiter] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        # Figures for benchmarks and the curious: batches committed and records in them.
        self.batches = 0
        self.records = 0

    async def write(self, record: ScoreRecord) -> bool:
        """Write ``record`` in the next batch; True iff this write was the first for its
        JOB id. Returns once the batch committed; raises what the batch raised."""
        if self._closed:
            raise GroupCommitClosed("this group commit is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        if not self._pending:
            self._since = loop.time()
        self._pending.append((record, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="group-commit")
        return await future

    async def close(self) -> None:
        """Refuse new writes, and wait until every record already taken is written."""
        self._closed = True
        while self._flusher is not None:
            await asyncio.wait({self._flusher})

    async def _flush(self) -> None:
        try:
            while self._pending:
                await self._linger()
                # The batch is taken once the writer lock is ours (SQLite: see
                # _sqlite_writer): what arrives while another process commits joins it.
                async with writer_lock(self.engine):
                    batch = self._take()
                    if batch:
                        await self._commit(batch)
        except BaseException:
            # Cancelled (the loop is going away): nobody will write what is pending.
            for _, future in self._pending:
                future.cancel()
            self._pending.clear()
            raise
        finally:
            self._flusher = None

    async def _linger(self) -> None:
        """Wait until the oldest pending record is ``linger_ms`` old, unless the batch is
        already full: a commit's fixed cost (the fsync, the writer lock, the thread hop)
        is then shared by what arrives meanwhile rather than paid by each lone guess."""
        if not self.linger_s or len(self._pending) >= self.max_batch:
            return
        wait = self._since + self.linger_s - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)

    def _take(self) -> list[_Waiter]:
        # A waiter cancelled before its batch was taken is not written at all.
        live = [w for w in self._pending[: self.max_batch] if not w[1].done()]
        del self._pending[: self.max_batch]
        return live

    async def _commit(self, batch: list[_Waiter]) -> None:
        try:
            written = await record_scores(self.engine, [record for record, _ in batch])
        except IntegrityError as e:
            if len(batch) == 1:
                _fail(batch, e)
                return
            # Whose fault? Each record alone, in its own transaction.
            for waiter in batch:
                await self._commit([waiter])
            return
        except Exception as e:  # noqa: BLE001 - every waiter gets what the batch got
            _fail(batch, e)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        self.batches += 1
        self.records += len(batch)
        _resolve(batch, written)


def _resolve(batch: Sequence[_Waiter], written: set[str]) -> None:
    """True for the first waiter of each JOB id the batch wrote, False for the rest."""
    for record, future in batch:
        first = record.job_id in written
        written.discard(record.job_id)
        if not future.done():
            future.set_result(first)


def _fail(batch: Sequence[_Waiter], error: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(error)
