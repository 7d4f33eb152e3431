"""``Outbox``: finished jobs' completions, sent in pipelined batches, so that throughput
is not bound by one round trip per completion."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backoff import Backoff
from ..errors import TRANSIENT
from ..hooks import Completion
from .claims import Key, key_for
from .trouble import Trouble
from .waits import wait_any

log = logging.getLogger("echomq.consumer")

Send = Callable[[Sequence[Completion]], Awaitable[Sequence[bool]]]


@dataclass(slots=True)
class Pending:
    job_id: str
    token: int
    result: bytes
    fut: asyncio.Future[bool]
    alone: bool = False  # refused by the server once: never fails a batch again
    due: float = 0.0  # after an error: the loop time of its next try
    backoff: Backoff | None = None  # its own pauses, from its first error


class Outbox:
    """Completions on their way. ``send`` sends one batch (a verdict per item: True
    counted, False stale); ``give_up(key)`` says, after an error, to stop trying."""

    def __init__(self, send: Send, give_up: Callable[[Key], bool]) -> None:
        self.send = send
        self.give_up = give_up
        self._items: list[Pending] = []
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def complete_soon(self, job_id: str, token: int, result: bytes) -> asyncio.Future[bool]:
        """Queue a completion; its future resolves to the verdict (False: stale, or
        given up)."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._items.append(Pending(job_id, token, result, fut))
        self._ready.set()
        return fut

    async def flush_forever(self) -> None:
        """Send the completions in batches while the consumer runs. One that errs is sent
        again after a pause of its own (complete is idempotent for its token), so one that
        keeps failing holds no other back."""
        loop = asyncio.get_running_loop()
        trouble = Trouble("complete")
        waiting: list[Pending] = []  # erred: each waits for its ``due`` time
        while True:
            if waiting:
                await wait_any(min(d.due for d in waiting) - loop.time(), self._ready)
            else:
                await self._ready.wait()
            self._ready.clear()
            now = loop.time()
            items = [d for d in waiting if d.due <= now]
            waiting = [d for d in waiting if d.due > now]
            items.extend(self._items)
            self._items = []
            # One draw for the round: items that failed together are retried together.
            draw = random.random()
            erred = False
            for d, verdict in await self._send(items):
                if d.fut.done():
                    continue
                if not isinstance(verdict, BaseException):
                    d.fut.set_result(bool(verdict))
                    continue
                erred = True
                trouble.note(verdict)
                d.alone = d.alone or not isinstance(verdict, TRANSIENT)
                if self.give_up(key_for(d.job_id, d.token)):
                    log.warning(
                        "job %s: completion not through within a lease of its first error;"
                        " left to the reaper",
                        d.job_id,
                    )
                    d.fut.set_result(False)
                    continue
                if d.backoff is None:
                    d.backoff = Backoff(first=0.1, jitter=False)
                d.due = loop.time() + d.backoff.next_delay() * draw
                waiting.append(d)
            if not erred and not waiting:
                trouble.ok()

    async def _send(self, items: list[Pending]) -> list[tuple[Pending, bool | BaseException]]:
        """One round: one batch, but items the server refused once each on its own; a batch
        the server refuses is sent again at once, item by item."""
        batch = [d for d in items if not d.alone]
        alone = [d for d in items if d.alone]
        if alone:
            together, apart = await asyncio.gather(self._send_batch(batch), self._send_alone(alone))
        else:  # the usual round: no task for a gather
            together, apart = await self._send_batch(batch), []
        if len(batch) > 1 and any(
            isinstance(v, BaseException) and not isinstance(v, TRANSIENT) for v in together
        ):
            together = await self._send_alone(batch)
        return [*zip(batch, together, strict=True), *zip(alone, apart, strict=True)]

    async def _send_batch(self, items: list[Pending]) -> list[bool | BaseException]:
        if not items:
            return []
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
