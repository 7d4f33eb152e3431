"""``Consumer``: runs a handler over claimed jobs, with leases kept, heartbeats and reaping.

Life of a job inside a consumer::

    claim (batch) -> ready -> handler running -> completion batched -> complete(token)
                                   |  extend every lease/3; a lost lease cancels it
                                   +-> exception -> fail(token) -> scheduled | dead

A consumer leases up to ``min(free slots, batch)`` jobs per claim, so what it holds is
what it runs. ``prefetch=N`` lets it lease N more ahead, so a finishing handler need not
wait a round trip for its next job; the price is fairness, since a prefetched job sits in
this process's buffer, outside the lanes' fair order, and a job that reaches its lane's
turn later waits behind it (measured end to end in ``docs/load.md``). When the queue is empty
it parks on the wake key with BLPOP (the timeout bounded by the next scheduled due time)
instead of polling. It also hosts its process's heartbeat and reaper.

Delivery is at least once: a handler may see a job again after a crash or a lost lease,
so its effects must be idempotent (key them on ``claim.job_id``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .codec import text
from .errors import Retry
from .ids import worker_id as mint_worker_id
from .queue import Queue
from .types import Claim, ClaimBatch

log = logging.getLogger("echomq.consumer")

Handler = Callable[[Claim], Awaitable[Any]]
Source = Literal["lanes", "jobs"]

# Errors that mean "Valkey is unreachable for now": wait and try again, never crash.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError, asyncio.TimeoutError)

# One reaper per process and queue, whatever the number of consumers in the process.
_REAPERS: set[str] = set()

_Key = tuple[str, int]


def _key(claim: Claim) -> _Key:
    return (claim.job_id, claim.token)


def _blocking_twin(conn: Any) -> Any:
    """A one-connection client like ``conn`` but with no socket timeout, for BLPOP: a
    blocked connection must neither sit in the shared pool nor trip its read timeout."""
    pool = getattr(conn, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_kwargs"):
        return conn  # e.g. a cluster client: its own pool routes the blocking call
    kwargs = dict(pool.connection_kwargs, socket_timeout=None)
    twin_pool = type(pool)(connection_class=pool.connection_class, max_connections=1, **kwargs)
    return type(conn).from_pool(twin_pool)


class _Backoff:
    """Exponential backoff with full jitter for retrying an unreachable server."""

    def __init__(self, first: float = 0.05, cap: float = 2.0) -> None:
        self.first, self.cap, self.n = first, cap, 0

    async def sleep(self) -> None:
        self.n += 1
        await asyncio.sleep(random.uniform(0, min(self.cap, self.first * 2**self.n)))

    def reset(self) -> None:
        self.n = 0


class Consumer:
    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        lease_ms: int = 10_000,
        concurrency: int = 1,
        worker_id: str | None = None,
        source: Source = "lanes",
        batch: int = 32,
        prefetch: int = 0,
        heartbeat_ms: int | None = None,
        lapse_ms: int = 3_000,
        reap_interval_ms: int = 1_000,
        park_max_ms: int = 5_000,
        grace_ms: int | None = None,
        reaper: bool = True,
        meta: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        if concurrency < 1 or batch < 1 or lease_ms < 100 or prefetch < 0:
            raise ValueError("concurrency and batch must be >= 1, prefetch >= 0, "
                             "lease_ms >= 100")
        if source not in ("lanes", "jobs"):
            raise ValueError("source must be 'lanes' or 'jobs'")
        # A beat must land well inside the lapse, or the reaper takes a live worker's jobs
        # between two beats: by default once a second, or thrice per lapse if that is shorter.
        if heartbeat_ms is None:
            heartbeat_ms = max(10, min(1_000, lapse_ms // 3))
        if heartbeat_ms >= lapse_ms:
            raise ValueError("heartbeat_ms must be shorter than lapse_ms")
        self.queue = queue
        self.handler = handler
        self.lease_ms = lease_ms
        self.concurrency = concurrency
        self.worker_id = worker_id or mint_worker_id()
        self.source: Source = source
        self.batch = batch
        self.prefetch = prefetch
        self.heartbeat_ms = heartbeat_ms
        self.lapse_ms = lapse_ms
        self.reap_interval_ms = reap_interval_ms
        self.park_max_ms = park_max_ms
        self.grace_ms = lease_ms if grace_ms is None else grace_ms
        self.reaper = reaper
        self.meta = meta
        # Counters, for tests and for the worker's self-description.
        self.completed = 0
        self.failed = 0
        self.stale = 0
        self.lost = 0
        self.released = 0
        self._ready: asyncio.Queue[Claim] = asyncio.Queue()
        # Keyed by (job_id, token), not job_id: after a lost lease the same job can come
        # back to this very consumer under a new token while the old attempt unwinds.
        self._held: dict[_Key, Claim] = {}  # claimed and not yet finished: ready or running
        self._running: dict[_Key, asyncio.Task[Any]] = {}
        self._lost: set[_Key] = set()
        self._finishing: set[_Key] = set()  # completion queued or in flight
        self._room = asyncio.Event()
        self._kick = asyncio.Event()  # our reaper moved jobs: claim now, do not park
        self._outbox: list[tuple[str, int, Any, asyncio.Future[bool]]] = []
        self._outbox_ready = asyncio.Event()
        self._stopping = asyncio.Event()  # stop(): claim no more, drain
        self._closing = asyncio.Event()  # drained: background loops end
        self._claimer: asyncio.Task[None] | None = None
        self._park_conn: Any = None

    # -- public -----------------------------------------------------------

    @property
    def in_flight(self) -> list[Claim]:
        """Jobs this consumer holds right now (running or prefetched)."""
        return list(self._held.values())

    @property
    def running(self) -> list[Claim]:
        """Jobs whose handler has not returned yet: no outcome of theirs has been sent, so
        a crash now leaves each of them leased to this worker until it is reclaimed."""
        return [self._held[k] for k, task in self._running.items()
                if k in self._held and not task.done()]

    def stop(self) -> None:
        """Ask for a clean stop: claim nothing more, let running handlers finish within
        ``grace_ms``, release whatever is left, leave the registry."""
        # An event, not a cancel: a cancel landing inside the client library mid-command
        # can be swallowed there, after which the claimer would park on with no one to
        # wake it. The claimer watches this event wherever it waits.
        self._stopping.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        owns_reaper = self.reaper and self.queue.name not in _REAPERS
        if owns_reaper:
            _REAPERS.add(self.queue.name)
        background = [
            asyncio.create_task(self._every(self.heartbeat_ms, self._beat), name="heartbeat"),
            asyncio.create_task(self._every(self.lease_ms // 3, self._keep_leases), name="leases"),
            asyncio.create_task(self._flush_loop(), name="completions"),
        ]
        if owns_reaper:
            background.append(
                asyncio.create_task(self._every(self.reap_interval_ms, self._reap), name="reaper")
            )
        runners = [
            asyncio.create_task(self._run_slot(), name=f"slot-{i}")
            for i in range(self.concurrency)
        ]
        self._claimer = asyncio.create_task(self._claim_loop(), name="claimer")
        try:
            await self._claimer  # returns once stop() was called; raises if it died of a bug
            await self._drain(runners)
        finally:
            self._closing.set()
            for t in runners + background:
                t.cancel()
            _, stuck = await asyncio.wait(runners + background, timeout=5)
            for t in stuck:  # should not happen; never let shutdown hang on it
                log.error("task %s did not stop", t.get_name())
            if owns_reaper:
                _REAPERS.discard(self.queue.name)
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            with contextlib.suppress(*TRANSIENT):
                await self.queue.unregister(self.worker_id)
            if self._park_conn is not None and self._park_conn is not self.queue.conn:
                await self._park_conn.aclose()
                self._park_conn = None

    # -- claiming -----------------------------------------------------------

    def _claim(self, count: int) -> Awaitable[ClaimBatch]:
        side = self.queue.lanes if self.source == "lanes" else self.queue.jobs
        return side.claim_many(self.worker_id, self.lease_ms, count)

    async def _claim_loop(self) -> None:
        backoff = _Backoff()
        unsure = False  # a claim broke in flight: the server may have leased us jobs anyway
        # Only the claimer blocks on BLPOP, on a connection of its own from the pool.
        while not self._stopping.is_set():
            room = self.concurrency + self.prefetch - len(self._held)
            if room <= 0 or any(c.stalls for c in self._held.values()):
                self._room.clear()
                await self._until(self._room.wait())
                continue
            asked = min(room, self.batch)
            self._kick.clear()
            try:
                if unsure:
                    await self._release_orphans()
                    unsure = False
                got = await self._claim(asked)
                backoff.reset()
            except TRANSIENT as e:
                log.warning("claim failed (%s); retrying", e)
                unsure = True
                await backoff.sleep()
                continue
            kept, extra = self._split(got.claims)
            if extra:
                # Handed back before the kept ones may start: a kept job that kills this
                # process must not take a release still in flight down with it.
                done = await asyncio.gather(
                    *(self.queue.jobs.release(c.job_id, c.token) for c in extra),
                    return_exceptions=True)
                self.released += sum(1 for ok in done if ok is True)
                unsure = unsure or any(isinstance(ok, BaseException) for ok in done)
            for claim in kept:
                self._held[_key(claim)] = claim
                self._ready.put_nowait(claim)
            if not extra and len(got.claims) < asked:
                await self._park(got)

    async def _release_orphans(self) -> None:
        """Hand back the jobs the server says we hold but we never heard of.

        A claim whose answer was lost (the connection broke under it, the server crashed
        after applying it) leased us jobs we know nothing of. Left alone they would wait
        out their lease and be counted as stalls, as if we had died running them; and
        since a reaped job goes back to the front of its lane, the next broken claim would
        likely take it again, until it was dead-lettered without ever having run. A
        release spends no delivery; a stale one (the job moved on) changes nothing.
        """
        conn = self.queue.conn
        known = {job_id for job_id, _ in self._held}
        ids = [text(x) for x in await conn.smembers(self.queue.keys.worker_jobs(self.worker_id))]
        for job_id in ids:
            if job_id in known:
                continue
            token = await conn.hget(self.queue.keys.job(job_id), "attempts")
            if token is not None and await self.queue.jobs.release(job_id, int(token)):
                self.released += 1
                log.info("released %s, leased to us by a claim whose answer was lost", job_id)

    @staticmethod
    def _split(claims: list[Claim]) -> tuple[list[Claim], list[Claim]]:
        """A claimed batch: the jobs to keep, and the suspects (jobs with stalls) beyond
        the first, to be released at once (which spends no delivery).

        Jobs whose holder died come back together from the reaper, and one lane claim
        would take them together again: a job that kills its worker would then take the
        same innocent neighbours down with it on every delivery, until they too were
        dead-lettered as poison. So a job whose holder died before travels alone: a batch
        keeps one, and while it is held this consumer claims nothing more (see
        _claim_loop); it never parks on the wake key meanwhile, so the token the releases
        leave goes to another. A job back after a failure or a release is no suspect: its
        worker lived to report it, so it travels with the others.
        """
        kept: list[Claim] = []
        extra: list[Claim] = []
        suspect = False
        for claim in claims:
            if claim.stalls:
                if suspect:
                    extra.append(claim)
                    continue
                suspect = True
            kept.append(claim)
        return kept, extra

    async def _park(self, got: ClaimBatch) -> None:
        timeout_ms = self.park_max_ms
        if got.next_due_ms is not None:
            timeout_ms = min(timeout_ms, max(10, got.next_due_ms - got.server_now_ms))
        if self._kick.is_set():
            return
        if self._park_conn is None:
            self._park_conn = _blocking_twin(self.queue.conn)
        try:
            parked = self._park_conn.blpop([self.queue.keys.wake], timeout=timeout_ms / 1000)
            if not await self._until(parked, self._kick):
                # Stopping or kicked mid-BLPOP: drop the blocked connection rather than
                # trust the cancelled read to leave it clean.
                await self._park_conn.aclose()
                self._park_conn = None
        except TRANSIENT as e:
            log.warning("park failed (%s)", e)
            await self._until(asyncio.sleep(min(1.0, timeout_ms / 1000)))

    async def _until(self, aw: Awaitable[Any], *also: asyncio.Event) -> bool:
        """Await ``aw`` unless stop() (or one of ``also``) comes first; True when ``aw``
        finished."""
        task = asyncio.ensure_future(aw)
        stops = [asyncio.ensure_future(e.wait()) for e in (self._stopping, *also)]
        try:
            await asyncio.wait({task, *stops}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for stop in stops:
                stop.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            return False
        task.result()  # surface errors (TRANSIENT ones are handled by the caller)
        return True

    # -- running --------------------------------------------------------------

    async def _run_slot(self) -> None:
        while True:
            claim = await self._ready.get()
            if _key(claim) in self._lost:
                self._forget(claim)
                continue
            await self._process(claim)

    async def _process(self, claim: Claim) -> None:
        key = _key(claim)
        task = asyncio.create_task(self.handler(claim), name=f"handler-{claim.job_id}")
        self._running[key] = task
        try:
            try:
                result = await task
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if key in self._lost and not (me and me.cancelling()):
                    return  # the lease went to someone else: no side effect of ours counts
                raise
            except Exception as e:  # noqa: BLE001 - any handler failure: retry or dead-letter
                self._finishing.add(key)
                await self._fail(claim, e)
                return
            if await self._complete(claim, result):
                self.completed += 1
            else:
                self.stale += 1
        finally:
            self._running.pop(key, None)
            self._finishing.discard(key)
            self._forget(claim)

    def _forget(self, claim: Claim) -> None:
        self._held.pop(_key(claim), None)
        self._lost.discard(_key(claim))
        self._room.set()

    async def _fail(self, claim: Claim, error: BaseException) -> None:
        retry_in = error.delay_ms if isinstance(error, Retry) else None
        text = f"{type(error).__name__}: {error}"[:2000]
        backoff = _Backoff()
        while True:
            try:
                outcome = await self.queue.jobs.fail(claim.job_id, claim.token, text, retry_in)
                break
            except TRANSIENT:
                await backoff.sleep()
        if outcome == "stale":
            self.stale += 1
        else:
            self.failed += 1
        log.info("job %s failed (%s): %s", claim.job_id, outcome, text)

    async def _complete(self, claim: Claim, result: Any) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        # From here on the lease keeper leaves the job alone: an extend racing the
        # completion on another connection would report a lease "lost" that was simply
        # finished.
        self._finishing.add(_key(claim))
        self._outbox.append((claim.job_id, claim.token, result, fut))
        self._outbox_ready.set()
        try:
            return await fut
        finally:
            self._finishing.discard(_key(claim))

    async def _flush_loop(self) -> None:
        """Send finished jobs' completions in pipelined batches: whatever piled up while
        the previous batch was in flight goes in the next one."""
        backoff = _Backoff()
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            items, self._outbox = self._outbox, []
            while items:
                try:
                    verdicts = await self.queue.jobs.complete_many((j, t, r) for j, t, r, _ in items)
                    break
                except TRANSIENT as e:
                    log.warning("complete failed (%s); retrying", e)
                    await backoff.sleep()
                except Exception as e:  # noqa: BLE001 - e.g. an unserialisable result
                    for *_, fut in items:
                        if not fut.done():
                            fut.set_exception(e)
                    items = []
            else:
                continue
            backoff.reset()
            for (*_, fut), ok in zip(items, verdicts, strict=True):
                if not fut.done():
                    fut.set_result(ok)

    # -- leases, heartbeat, reaper ----------------------------------------------

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None]]) -> None:
        # Loops on a flag as well as on cancellation: a cancel that lands inside the client
        # library mid-command can be swallowed there, and the loop must still end.
        loop = asyncio.get_running_loop()
        while not self._closing.is_set():
            started = loop.time()
            try:
                await fn()
            except TRANSIENT as e:
                log.warning("%s failed (%s)", fn.__name__, e)
            # Start to start, never later than the interval: the re-claim bound (lapse +
            # reap interval) and the beats' margin inside the lapse are built on it. The
            # jitter, which keeps processes from beating in step, only makes it earlier.
            pause = max(0.0, interval_ms / 1000 * random.uniform(0.8, 1.0)
                        - (loop.time() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), pause)

    async def _keep_leases(self) -> None:
        held = [c for k, c in self._held.items() if k not in self._finishing]
        if not held:
            return
        verdicts = await self.queue.jobs.extend_many(
            [(c.job_id, c.token) for c in held], self.lease_ms
        )
        for claim, ok in zip(held, verdicts, strict=True):
            key = _key(claim)
            if not ok and key in self._held and key not in self._lost | self._finishing:
                self.lost += 1
                self._lost.add(key)
                task = self._running.get(key)
                if task is not None:
                    task.cancel()  # stop a stale attempt's side effects at once
                log.warning("lease of %s lost; handler cancelled", claim.job_id)

    async def _beat(self) -> None:
        meta: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state": "busy" if self._running else "idle",
            "jobs": ",".join(job_id for job_id, _ in self._running),
            "jobs_done": self.completed,
        }
        if self.meta is not None:
            meta.update(self.meta())
        await self.queue.heartbeat(self.worker_id, self.lapse_ms, meta)

    async def _reap(self) -> None:
        if await self.queue.stalled.reap():
            # The jobs are back on their lanes and their wake token is on the wake key, but
            # the consumer parked longest may be the very holder presumed dead: a frozen
            # (SIGSTOPped, paused) process keeps its BLPOP registered and swallows the token,
            # leaving the live ones parked until park_max_ms. So the consumer that hosts the
            # reaper stops parking and claims at once.
            self._kick.set()

    # -- stopping -----------------------------------------------------------------

    async def _drain(self, runners: list[asyncio.Task[None]]) -> None:
        # Prefetched jobs never started: hand them back untouched.
        while not self._ready.empty():
            claim = self._ready.get_nowait()
            await self._release(claim)
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=self.grace_ms / 1000)
        for key, task in list(self._running.items()):
            if task.done():
                continue  # finished in time: its completion (or failure) is on its way
            claim = self._held.get(key)
            self._lost.add(key)  # our handler must not count any more
            task.cancel()
            if claim is not None:
                await self._release(claim)
        # Let the finished jobs' completions land before the flusher is cancelled.
        deadline = asyncio.get_running_loop().time() + 10
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def _release(self, claim: Claim) -> None:
        with contextlib.suppress(*TRANSIENT):
            if await self.queue.jobs.release(claim.job_id, claim.token):
                self.released += 1
        self._held.pop(_key(claim), None)
