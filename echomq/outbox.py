"""``Outbox``: finished jobs' completions, sent in pipelined batches.

A finished handler does not wait a round trip of its own: its completion joins the
outbox, and one flusher sends whatever piled up while the previous batch was in flight,
so throughput is not bound by one round trip per completion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .backoff import Backoff
from .claims import Key
from .errors import TRANSIENT
from .hooks import Completion
from .trouble import Trouble

log = logging.getLogger("echomq.consumer")

Send = Callable[[Sequence[Completion]], Awaitable[Sequence[bool]]]


@dataclass(slots=True)
class Pending:
    """A finished job's completion waiting in the outbox."""

    job_id: str
    token: int
    result: bytes
    fut: asyncio.Future[bool]


class Outbox:
    """Completions on their way. ``send`` sends one batch (one verdict per item: True
    counted, False stale); ``give_up(key)`` says, after an error, whether the item's
    lease has surely run out, so that it is given up (the job is the reaper's)."""

    def __init__(self, send: Send, give_up: Callable[[Key], bool]) -> None:
        self.send = send
        self.give_up = give_up
        self._items: list[Pending] = []
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def complete_soon(self, job_id: str, token: int, result: bytes) -> asyncio.Future[bool]:
        """Queue a completion; the future its verdict will resolve (True counted, False
        stale or given up). One still unsent when the consumer stops stays pending: the
        consumer waits for its verdicts before it stops the flusher, for up to 10 s, and
        a job left unresolved is its lease's, as any other."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._items.append(Pending(job_id, token, result, fut))
        self._ready.set()
        return fut

    async def flush_forever(self) -> None:
        """Send the completions in batches, for as long as the consumer runs.

        A batch that errs is sent again (complete is idempotent for its own token, so the
        jobs it did complete report True again); after a server error (not a broken
        connection) each item goes alone, so one bad item cannot hold the others back.
        Meanwhile the lease keeper renews the stuck jobs' leases; an item whose lease
        could not be renewed for ``lease_ms`` is given up: the job is the reaper's, and
        the completion would be stale anyway."""
        backoff = Backoff(first=0.1)
        trouble = Trouble("complete")
        while True:
            await self._ready.wait()
            self._ready.clear()
            items, self._items = self._items, []
            alone = False
            while items:
                outcome = await (self._send_alone(items) if alone else self._send_batch(items))
                left = []
                for d, verdict in zip(items, outcome, strict=True):
                    if d.fut.done():
                        continue
                    if isinstance(verdict, BaseException):
                        trouble.note(verdict)
                        alone = alone or not isinstance(verdict, TRANSIENT)
                        if self.give_up((d.job_id, d.token)):
                            log.warning(
                                "job %s: completion not through within its lease;"
                                " left to the reaper",
                                d.job_id,
                            )
                            d.fut.set_result(False)
                        else:
                            left.append(d)
                    else:
                        d.fut.set_result(bool(verdict))
                items = left
                if items:
                    await backoff.sleep()
                else:
                    backoff.reset()
                    trouble.ok()

    async def _send_batch(self, items: list[Pending]) -> list[bool | BaseException]:
        try:
            return list(await self.send([(d.job_id, d.token, d.result) for d in items]))
        except Exception as e:  # noqa: BLE001 - retried by the caller
            return [e] * len(items)

    async def _send_alone(self, items: list[Pending]) -> list[bool | BaseException]:
        answers: list[Any] = await asyncio.gather(
            *(self.send([(d.job_id, d.token, d.result)]) for d in items),
            return_exceptions=True,
        )
        return [a if isinstance(a, BaseException) else a[0] for a in answers]
