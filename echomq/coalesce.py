"""Script calls that arrive while one is in flight share the next round trip.

A web process enqueues each request's job on its own; under load many requests wait on
Valkey at once, and each paid a round trip of its own: a write, a read, a wake-up of the
event loop and of Valkey's. :class:`Coalescer` sends a call at once when none is in
flight, and otherwise queues it for the next pipeline, which leaves the moment the call in
flight answers. So it adds no wait to a lone call, and a burst shares one round trip per
batch (the same self-clocking as the game's group commit).

Each script still runs on its own and atomically, in the order the calls were made (a
pipeline is not a transaction); each caller gets its own reply or its own error. A caller
cancelled while its call waits in the queue leaves it out if it has not been sent; once
sent, it runs and its reply is dropped, as with a cancelled single call.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .scripts import Call, Runner, Script

__all__ = ["DEFAULT_MAX_BATCH", "Coalescer"]

DEFAULT_MAX_BATCH = 64

_Waiter = tuple[Call, "asyncio.Future[Any]"]


class Coalescer:
    """``await coalescer.run(script, keys, args)``: :meth:`Runner.run`, sharing a round
    trip with the calls made while another is in flight (see the module docstring)."""

    def __init__(self, runner: Runner, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.runner = runner
        self.max_batch = max_batch
        # A cluster client pipelines no scripts (Runner.run_each sends them side by side):
        # nothing to share, so calls go straight through.
        self._direct = hasattr(runner.conn, "get_node_from_key")
        self._busy = False
        self._pending: list[_Waiter] = []
        self._flusher: asyncio.Task[None] | None = None
        # Figures for benchmarks and the curious: round trips that carried a batch, and
        # the calls they carried.
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
