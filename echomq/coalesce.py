"""Script calls that arrive while one is in flight share the next round trip.

A lone call is sent at once; calls made meanwhile wait for the next pipeline, which leaves
the moment the call in flight answers: no added wait, one round trip per burst. Each
script still runs on its own, in call order, and each caller gets its own reply or error;
a call cancelled before it is sent is left out.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .scripts import Call, Runner, Script

__all__ = ["DEFAULT_MAX_BATCH", "Coalescer"]

DEFAULT_MAX_BATCH = 64

_Waiter = tuple[Call, "asyncio.Future[Any]"]


class Coalescer:
    """``await coalescer.run(script, keys, args)``: :meth:`Runner.run`, sharing round trips."""

    def __init__(self, runner: Runner, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.runner = runner
        self.max_batch = max_batch
        # A cluster client pipelines no scripts: nothing to share.
        self._direct = hasattr(runner.conn, "get_node_from_key")
        self._busy = False
        self._pending: list[_Waiter] = []
        self._flusher: asyncio.Task[None] | None = None
        # Round trips that carried a batch, and the calls they carried.
        self.batches = 0
        self.batched = 0

    async def run(self, script: Script, keys: Any, args: Any) -> Any:
        if self._direct:
            return await self.runner.run(script, keys, args)
        if self._busy:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._pending.append(((script, keys, args), future))
            return await future
        self._busy = True
        try:
            return await self.runner.run(script, keys, args)
        finally:
            self._busy = False
            if self._pending and self._flusher is None:
                self._busy = True
                self._flusher = asyncio.create_task(self._flush(), name="echomq-coalesce")

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                live = [(call, f) for call, f in batch if not f.done()]  # cancelled: unsent
                if not live:
                    continue
                self.batches += 1
                self.batched += len(live)
                try:
                    replies = await self.runner.run_each([call for call, _ in live])
                except BaseException as e:  # the round trip itself failed: every call did
                    for _, f in live:
                        if not f.done():
                            f.set_exception(e)
                    if isinstance(e, asyncio.CancelledError):
                        raise
                    continue
                for (_, f), reply in zip(live, replies, strict=True):
                    if f.done():
                        continue
                    if isinstance(reply, Exception):
                        f.set_exception(reply)
                    else:
                        f.set_result(reply)
        finally:
            self._busy = False
            self._flusher = None
            for _, f in self._pending:  # only if this task was cancelled: nobody will send
                if not f.done():
                    f.cancel()
            self._pending.clear()
