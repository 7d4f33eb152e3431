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

Every loop survives every error: a connection error, any other ``RedisError`` (``OOM``
under ``noeviction``, ``READONLY`` after a failover) or a bug. Each is logged once per
kind and retried with backoff; a transition that cannot be sent within the job's lease is
left to the reaper, which the fencing token makes safe. A handler result JSON cannot carry
fails that one job. If a task of the consumer ends anyway, ``run()`` raises rather than
carry on half-alive.

Idle cost: a consumer holding no job beats every ``idle_heartbeat_ms`` (its registry
deadline then is ``idle_lapse_ms``: nothing waits on its death), parks on BLPOP for up to
``park_max_ms``, and reaps only while it holds the queue's reaper lock (one reaper per
queue, ``SET NX PX``), at the next moment anything can come due. A claim moves the
worker's deadline back to the short lapse, so recovery times are those of a busy worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import checks
from .backoff import Backoff
from .codec import text
from .errors import TRANSIENT, Retry, Unavailable
from .hooks import HookChain, Hooks, checked
from .ids import worker_id as mint_worker_id
from .jobs import encode_result
from .queue import Queue
from .stalled import pulse_gap_ms
from .types import Claim, ClaimBatch

log = logging.getLogger("echomq.consumer")

Handler = Callable[[Claim], Awaitable[Any]]
Source = Literal["lanes", "jobs"]


# One reaper per process and queue, whatever the number of consumers in the process.
_REAPERS: set[str] = set()

_Key = tuple[str, int]


def _key(claim: Claim) -> _Key:
    return (claim.job_id, claim.token)


class ResultNotEncodable(TypeError):
    """The handler returned a value JSON cannot carry (a set, an object …): its job fails."""


class HandlerCancelled(Exception):
    """The handler was cancelled by something other than this consumer: a failed attempt."""


class TimedOut(Exception):
    """The handler ran past ``timeout_ms``: it was cancelled and its job failed with the
    error ``"timed out"``."""


# How long a cancelled handler (timed out, or its lease lost) may take to unwind before
# its slot gives up on it: a handler that swallows cancellation must not hold a slot, or
# its job, forever.
_UNWIND_S = 1.0


# Connection settings a cluster node carries that only mean something to a cluster client.
_CLUSTER_ONLY = (
    "redis_connect_func",
    "himport_registry",
    "response_callbacks",
    "maint_notifications_config",
    "event_dispatcher",
)


async def _blocking_twin(conn: Any, key: str) -> Any:
    """A one-connection client to the server that holds ``key``, like ``conn`` but with no
    socket timeout, for BLPOP: a blocked connection must neither sit in a shared pool nor
    trip its read timeout, and closing it (a kicked park) must never close ``conn``.

    For a cluster client that is a plain client on the node serving ``key``'s slot (a
    resharding that moves it shows up as a MOVED error; the park then drops the twin and
    builds a new one)."""
    pool = getattr(conn, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_kwargs"):
        kwargs = dict(pool.connection_kwargs, socket_timeout=None)
        twin_pool = type(pool)(connection_class=pool.connection_class, max_connections=1, **kwargs)
        return type(conn).from_pool(twin_pool)
    if hasattr(conn, "get_node_from_key"):
        if getattr(conn, "_initialize", False):
            await conn.initialize()
        node = conn.get_node_from_key(key)
        kwargs = {k: v for k, v in node.connection_kwargs.items() if k not in _CLUSTER_ONLY}
        kwargs.update(host=node.host, port=node.port, socket_timeout=None)
        twin_pool = redis.asyncio.ConnectionPool(
            connection_class=node.connection_class, max_connections=1, **kwargs
        )
        return redis.asyncio.Redis.from_pool(twin_pool)
    raise TypeError(f"cannot park on a {type(conn).__name__}: no pool and no cluster nodes")


def _kind(exc: BaseException) -> str:
    """What makes two errors "the same": the type, and for a server error its code
    (``OOM``, ``READONLY``, ``NOSCRIPT`` …)."""
    if isinstance(exc, ResponseError) and str(exc):
        return f"{type(exc).__name__} {str(exc).split()[0]}"
    return type(exc).__name__


class _Trouble:
    """The errors of one loop, logged once per kind until the loop succeeds again."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.seen: set[str] = set()

    def note(self, exc: BaseException) -> None:
        kind = _kind(exc)
        if kind in self.seen:
            log.debug("%s failed again (%s)", self.where, exc)
            return
        self.seen.add(kind)
        # A server or connection error says all there is; anything else is a bug: trace it.
        log.warning(
            "%s failed (%s: %s); retrying",
            self.where,
            type(exc).__name__,
            exc,
            exc_info=None if isinstance(exc, (*TRANSIENT, ResponseError)) else exc,
        )

    def ok(self) -> None:
        if self.seen:
            log.info("%s recovered", self.where)
            self.seen.clear()


@dataclass(slots=True)
class _Done:
    """A finished job's completion waiting in the outbox."""

    job_id: str
    token: int
    result: bytes
    fut: asyncio.Future[bool]


class Consumer:
    """Runs ``handler`` over a queue's jobs: claims under a lease, completes each job with
    the handler's return value under its fencing token, fails it on an exception (retried
    with backoff, dead after ``max_attempts``), and keeps the worker's heartbeat, the
    leases of running jobs and (as the queue's one reaper, under a lock) the reaper going.

    Args:
        queue: the :class:`~echomq.Queue` to consume.
        handler: ``async (Claim) -> result``; the result must be JSON-encodable (one that
            is not fails its job with a clear error).
        lease_ms: each claim's lease on the server clock, renewed while the handler runs;
            at least 100.
        concurrency: handlers running at once (>= 1).
        worker_id: a branded ``WRK_…`` id; minted when not given. Never reuse one.
        source: ``"lanes"`` (fair order over lanes) or ``"jobs"`` (the plain FIFO queue).
        batch: at most this many jobs leased per claim call.
        prefetch: jobs claimed beyond ``concurrency`` and held ready (0 = none: a held
            job is a job another worker cannot take).
        heartbeat_ms: beat interval while holding jobs; default once a second, or three
            times per ``lapse_ms`` when that is shorter. Must be < ``lapse_ms``.
        lapse_ms: after this long without a beat, a worker that holds jobs is presumed
            dead and its jobs are reaped (fencing makes a slow-but-alive one harmless).
        reap_interval_ms: the reaper's shortest pause; a dead holder's job comes back
            within its deadline + this.
        park_max_ms: the longest BLPOP on the wake key when idle (>= 10).
        idle_heartbeat_ms: beat interval while holding nothing (never below
            ``heartbeat_ms``); its deadline leaves room for two lost beats.
        grace_ms: on :meth:`stop`, how long running handlers may finish before their jobs
            are released; default ``lease_ms``.
        reaper: take part in the queue's reaper election (off for a consumer that must
            never reap, e.g. in a test).
        meta: called at each beat; its fields are stored on the worker's registry row
            (shown by ``Queue.workers()``).
        timeout_ms: a handler still running this long after it started is cancelled and
            its job failed with the error ``"timed out"`` (a failure like any other:
            backoff, counted toward ``max_attempts``). None: no limit. A handler that
            ignores the cancellation is left behind after a second; its job is failed
            anyway and its slot freed.
        probe: while a dependency is down (a handler raised :class:`~echomq.Unavailable`),
            ``async () -> Any`` that raises while it is still down. None (the default):
            one job at a time is let through as the probe, so the probe is exactly what
            the handler needs.
        probe_max_ms: the longest pause between two probes (backoff from 100 ms up to
            this; at most 5,000).
        hooks: :class:`~echomq.Hooks` for this consumer: around the handler, on claim,
            around completions, on fail, on release, after lease renewals. They run after
            the queue's own (``Queue(..., hooks=)``), which are read when :meth:`run`
            starts. A raising hook never loses a job: see :mod:`echomq.hooks`.

    A dependency down: a handler that raises :class:`~echomq.Unavailable` hands its job
    back as ``release`` does (no delivery spent, no failure counted), and the consumer
    claims nothing more until the dependency answers: jobs it holds and has not started
    go back too, and it probes with backoff, at most ``probe_max_ms`` apart. Without a
    ``probe`` the probe is one job, claimed alone once nothing else is held; any outcome
    of a handler started while waiting other than ``Unavailable`` (a completion, another
    error) ends the wait, as does a ``probe`` that returns. Meanwhile the worker's row
    says ``state: waiting`` (:attr:`waiting`).

    A job whose holder died before (a suspect, ``Claim.stalls > 0``) runs alone: while it
    is held this consumer claims nothing more, but for at most ``min(lease_ms,
    timeout_ms)`` after it started, so a suspect that hangs never stops the consumer.

    A claim whose reply does not arrive within the connection's ``socket_timeout`` (too
    many large payloads) halves the batch for the next claims; each claim that fills the
    smaller batch lets it grow back by one, up to ``batch``.
    """

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
        park_max_ms: int = 15_000,
        idle_heartbeat_ms: int = 5_000,
        grace_ms: int | None = None,
        reaper: bool = True,
        meta: Callable[[], dict[str, Any]] | None = None,
        timeout_ms: int | None = None,
        probe: Callable[[], Awaitable[Any]] | None = None,
        probe_max_ms: int = 1_000,
        hooks: Iterable[Hooks] | None = None,
    ) -> None:
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be an echomq.Queue, got {type(queue).__name__}")
        if not callable(handler):
            raise TypeError("handler must be an async callable taking a Claim")
        for name, value in (
            ("lease_ms", lease_ms),
            ("concurrency", concurrency),
            ("batch", batch),
            ("prefetch", prefetch),
            ("lapse_ms", lapse_ms),
            ("reap_interval_ms", reap_interval_ms),
            ("park_max_ms", park_max_ms),
            ("idle_heartbeat_ms", idle_heartbeat_ms),
            ("probe_max_ms", probe_max_ms),
        ):
            checks.integer(name, value)
        checks.optional_integer("heartbeat_ms", heartbeat_ms, at_least=1)
        checks.optional_integer("timeout_ms", timeout_ms, at_least=1)
        if probe is not None and not callable(probe):
            raise TypeError("probe must be an async callable taking no argument")
        if not 10 <= probe_max_ms <= 5_000:
            raise ValueError("probe_max_ms must be between 10 and 5000")
        checks.optional_integer("grace_ms", grace_ms, at_least=0)
        checks.optional_name("worker_id", worker_id)
        if concurrency < 1 or batch < 1 or lease_ms < 100 or prefetch < 0:
            raise ValueError("concurrency and batch must be >= 1, prefetch >= 0, lease_ms >= 100")
        if source not in ("lanes", "jobs"):
            raise ValueError("source must be 'lanes' or 'jobs'")
        # A beat must land well inside the lapse, or the reaper takes a live worker's jobs
        # between two beats: by default once a second, or thrice per lapse if that is shorter.
        if heartbeat_ms is None:
            heartbeat_ms = max(10, min(1_000, lapse_ms // 3))
        if heartbeat_ms >= lapse_ms:
            raise ValueError("heartbeat_ms must be shorter than lapse_ms")
        if park_max_ms < 10 or reap_interval_ms < 1:
            raise ValueError("park_max_ms must be >= 10, reap_interval_ms >= 1")
        # Idle beats are rarer, never more frequent than busy ones; the idle deadline
        # leaves room for two lost beats, and is never shorter than the busy lapse.
        idle_heartbeat_ms = max(heartbeat_ms, idle_heartbeat_ms)
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
        self.idle_heartbeat_ms = idle_heartbeat_ms
        self.idle_lapse_ms = max(lapse_ms, 3 * idle_heartbeat_ms)
        # The reaper lock outlives the longest pause between two turns of its holder by
        # one reap interval: a holder that dies is replaced within lapse + reap interval.
        self.reap_lock_ms = max(reap_interval_ms, lapse_ms) + reap_interval_ms
        # The longest silence of the server a live queue leaves (beats and reap calls):
        # a longer one is an outage and every holder gets a lapse (stalled.pulse_gap_ms).
        self.pulse_gap_ms = pulse_gap_ms(lapse_ms, heartbeat_ms, reap_interval_ms)
        self.grace_ms = lease_ms if grace_ms is None else grace_ms
        self.reaper = reaper
        self.meta = meta
        self.timeout_ms = timeout_ms
        self.probe = probe
        self.probe_max_ms = probe_max_ms
        self.hooks = checked(hooks)
        self._hooks = HookChain((*queue.hooks, *self.hooks))  # again at run()
        self._handle = self._hooks.wrap(handler)
        # How long a suspect keeps this consumer from claiming more, from its start.
        self.suspect_ms = lease_ms if timeout_ms is None else min(lease_ms, timeout_ms)
        # Counters, for tests and for the worker's self-description.
        self.completed = 0
        self.failed = 0
        self.stale = 0
        self.lost = 0
        self.released = 0
        self.timed_out = 0  # handlers cancelled after timeout_ms (each also in failed)
        self.unavailable = 0  # jobs handed back because a dependency was down
        self._ready: asyncio.Queue[Claim] = asyncio.Queue()
        # A dependency down: why (None while all is well), since when (loop time), and
        # when the last wait ended; _epoch counts the waits.
        self._outage: str | None = None
        self._outage_at = 0.0
        self._resumed_at = 0.0
        self._epoch = 0
        self._resumed = asyncio.Event()
        self._probes: set[_Key] = set()  # jobs claimed as the probe
        self._chores: set[asyncio.Task[Any]] = set()  # releases sent in the background
        # Claim size now: halved when a claim's reply does not arrive in time.
        self._batch_now = batch
        self._started: dict[_Key, float] = {}  # loop time each running handler started
        self._lost_signal: dict[_Key, Callable[[], None]] = {}
        # Keyed by (job_id, token), not job_id: after a lost lease the same job can come
        # back to this very consumer under a new token while the old attempt unwinds.
        self._held: dict[_Key, Claim] = {}  # claimed and not yet finished: ready or running
        self._running: dict[_Key, asyncio.Task[Any]] = {}
        self._lost: set[_Key] = set()
        self._finishing: set[_Key] = set()  # completion queued or in flight
        # Finished jobs whose outcome (complete or fail) met an error and is being retried,
        # with the loop time past which it is given up: the lease keeper renews these (the
        # outcome may take a while), and each renewal moves the give-up time on.
        self._stuck: dict[_Key, float] = {}
        self._room = asyncio.Event()
        self._kick = asyncio.Event()  # our reaper moved jobs: claim now, do not park
        self._busy = asyncio.Event()  # the claimer took jobs: beat at the busy cadence
        self._outbox: list[_Done] = []
        self._outbox_ready = asyncio.Event()
        self._stopping = asyncio.Event()  # stop(): claim no more, drain
        self._closing = asyncio.Event()  # drained: background loops end
        self._claimer: asyncio.Task[None] | None = None
        self._park_conn: Any = None
        self._park_trouble = _Trouble("park")

    # -- public -----------------------------------------------------------

    @property
    def in_flight(self) -> list[Claim]:
        """Jobs this consumer holds right now (running or prefetched)."""
        return list(self._held.values())

    @property
    def running(self) -> list[Claim]:
        """Jobs whose handler has not returned yet: no outcome of theirs has been sent, so
        a crash now leaves each of them leased to this worker until it is reclaimed."""
        return [
            self._held[k]
            for k, task in self._running.items()
            if k in self._held and not task.done()
        ]

    @property
    def waiting(self) -> bool:
        """True while a dependency is down: this consumer claims nothing but its probe."""
        return self._outage is not None

    @property
    def batch_now(self) -> int:
        """The claim size now (``batch``, or less after claims whose reply timed out)."""
        return self._batch_now

    def stop(self) -> None:
        """Ask for a clean stop: claim nothing more, let running handlers finish within
        ``grace_ms``, release whatever is left, leave the registry."""
        # An event, not a cancel: a cancel landing inside the client library mid-command
        # can be swallowed there, after which the claimer would park on with no one to
        # wake it. The claimer watches this event wherever it waits.
        self._stopping.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Consume until :meth:`stop` (or SIGTERM/SIGINT with
        ``install_signal_handlers``), then drain. Raises ``RuntimeError`` if one of the
        consumer's background loops ends unexpectedly, instead of running half-alive."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        self._hooks = HookChain((*self.queue.hooks, *self.hooks))  # hooks added since
        self._handle = self._hooks.wrap(self.handler)
        owns_reaper = self.reaper and self.queue.name not in _REAPERS
        if owns_reaper:
            _REAPERS.add(self.queue.name)
        background = [
            asyncio.create_task(self._beat_loop(), name="heartbeat"),
            asyncio.create_task(self._every(self.lease_ms // 3, self._keep_leases), name="leases"),
            asyncio.create_task(self._flush_loop(), name="completions"),
        ]
        if owns_reaper:
            background.append(asyncio.create_task(self._reap_loop(), name="reaper"))
        runners = [
            asyncio.create_task(self._run_slot(), name=f"slot-{i}") for i in range(self.concurrency)
        ]
        self._claimer = asyncio.create_task(self._claim_loop(), name="claimer")
        everything = [*runners, *background, self._claimer]
        try:
            # Every task loops until stop(); only the claimer returns (once stop() was
            # called). Any other ending is a bug: raise rather than run on half-alive,
            # e.g. claiming and renewing leases with no slot left to run the jobs.
            done, _ = await asyncio.wait(everything, return_when=asyncio.FIRST_COMPLETED)
            ended = [t for t in done if t is not self._claimer]
            if ended:
                task = ended[0]
                error = None if task.cancelled() else task.exception()
                raise RuntimeError(f"consumer task {task.get_name()} ended unexpectedly") from error
            await self._claimer  # raises if it died of a bug
            await self._drain(runners)
        finally:
            self._closing.set()
            self._stopping.set()
            for t in everything:
                t.cancel()
            _, stuck = await asyncio.wait(everything, timeout=5)
            for t in stuck:  # should not happen; never let shutdown hang on it
                log.error("task %s did not stop", t.get_name())
            if owns_reaper:
                _REAPERS.discard(self.queue.name)
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            try:
                await self.queue.unregister(self.worker_id)
            except Exception as e:  # noqa: BLE001 - best effort: the registry entry lapses
                log.warning("unregister failed (%s)", e)
            await self._drop_park_conn()

    # -- claiming -----------------------------------------------------------

    def _claim(self, count: int) -> Awaitable[ClaimBatch]:
        side = self.queue.lanes if self.source == "lanes" else self.queue.jobs
        return side.claim_many(self.worker_id, self.lease_ms, count)

    async def _claim_loop(self) -> None:
        backoff = Backoff(first=0.1)
        trouble = _Trouble("claim")
        unsure = False  # a claim broke in flight: the server may have leased us jobs anyway
        # The last claim brought suspects (jobs whose holder died): more are likely next
        # in line, and all but one of a batch would only be released again, so claim one
        # at a time until a claim comes back clean. (With 32 slots, a kill storm's reaped
        # jobs were otherwise leased and released about six times each.)
        careful = False
        # Probes: 0.1, 0.2, 0.4 ... s up to probe_max_ms, each drawn in [half, all] of that
        # (spread out, yet never so early that a long wait probes in a flurry).
        probes = Backoff(
            first=min(0.1, self.probe_max_ms / 1000), cap=self.probe_max_ms / 1000, jitter=False
        )
        epoch = self._epoch
        # Only the claimer blocks on BLPOP, on a connection of its own from the pool.
        while not self._stopping.is_set():
            probing = False
            if self._outage is not None:
                if epoch != self._epoch:  # a new wait: probe soon, then back off
                    epoch = self._epoch
                    probes.reset()
                if not await self._await_dependency(probes):
                    continue
                probing = True
            room = self.concurrency + self.prefetch - len(self._held)
            hold = self._suspect_hold()
            if room <= 0 or hold is not None:
                self._room.clear()
                if hold is None:
                    await self._until(self._room.wait())
                else:  # a suspect runs: claim more once it is done, or has run long enough
                    await self._wait_any(hold, self._room, self._stopping)
                continue
            asked = 1 if careful or probing else min(room, self._batch_now)
            self._kick.clear()
            try:
                if unsure:
                    await self._release_orphans()
                    unsure = False
                got = await self._claim(asked)
                backoff.reset()
                trouble.ok()
            except Exception as e:  # noqa: BLE001 - any error: the claimer must go on
                trouble.note(e)
                unsure = True
                if isinstance(e, (RedisTimeoutError, asyncio.TimeoutError)) and asked > 1:
                    # The reply may be too large to read in time (big payloads): the same
                    # claim again would time out again, on the same lanes' jobs.
                    self._batch_now = max(1, asked // 2)
                    log.info(
                        "a claim of %d jobs timed out; claiming at most %d at a time",
                        asked,
                        self._batch_now,
                    )
                await self._until(backoff.sleep())
                continue
            if len(got.claims) == asked == self._batch_now < self.batch:
                self._batch_now += 1  # that size went through: grow back, gently
            if got.claims:
                self._busy.set()
                careful = any(c.stalls for c in got.claims)
                await self._hooks.claimed(got.claims)
            if self._outage is not None and not probing:
                # Claimed as the outage began: hand it all back, untouched.
                for claim in got.claims:
                    self._held[_key(claim)] = claim
                    self._chore(self._hand_back_unstarted(claim))
                continue
            if probing:
                self._probes.update(_key(c) for c in got.claims)
            kept, extra = self._split(got.claims)
            if extra:
                # Handed back before the kept ones may start: a kept job that kills this
                # process must not take a release still in flight down with it.
                done = await asyncio.gather(
                    *(self.queue.jobs.release(c.job_id, c.token) for c in extra),
                    return_exceptions=True,
                )
                self.released += sum(1 for ok in done if ok is True)
                unsure = unsure or any(isinstance(ok, BaseException) for ok in done)
                for claim, ok in zip(extra, done, strict=True):
                    if isinstance(ok, bool):
                        await self._hooks.released(claim, ok)
            for claim in kept:
                self._held[_key(claim)] = claim
                self._ready.put_nowait(claim)
            if not extra and len(got.claims) < asked:
                await self._park(got)

    async def _await_dependency(self, probes: Backoff) -> bool:
        """While a dependency is down: True when one job may be claimed as the probe,
        False to look again (the wait ended, or a probe of ``self.probe`` ran)."""
        if self.probe is not None:
            pause = probes.next_delay() * random.uniform(0.5, 1.0)
            await self._until(asyncio.sleep(pause), self._resumed)
            if self._outage is None or self._stopping.is_set():
                return False
            epoch = self._epoch
            try:
                if not await self._until(self.probe()):
                    return False  # stopping
            except Exception as e:  # noqa: BLE001 - still down, whatever it says
                log.debug("probe: still unavailable (%s: %s)", type(e).__name__, e)
                return False
            if epoch == self._epoch:
                self._resume("the probe answered")
            return False
        now = asyncio.get_running_loop().time()
        if any(self._started.get(k, now) >= self._outage_at for k in self._held):
            # A job taken since the wait began is on its way: its outcome is the probe.
            # (Handlers from before the wait do not hold the probe back: one may hang.)
            self._room.clear()
            await self._until(self._room.wait(), self._resumed)
            return False
        pause = probes.next_delay() * random.uniform(0.5, 1.0)
        await self._until(asyncio.sleep(pause), self._resumed)
        return self._outage is not None and not self._stopping.is_set()

    def _enter_outage(self, started: float, error: Unavailable) -> None:
        """A handler that started at loop time ``started`` raised ``Unavailable``: wait,
        unless it started before the last wait ended (old news)."""
        if self._outage is not None or started < self._resumed_at:
            return
        loop = asyncio.get_running_loop()
        self._outage = f"{error}"[:200] or type(error).__name__
        self._outage_at = loop.time()
        self._epoch += 1
        self._resumed.clear()
        self._busy.set()  # beat soon: the row says "waiting"
        log.warning(
            "a dependency is unavailable (%s): claiming nothing until it answers",
            self._outage,
            extra={"worker_id": self.worker_id},
        )
        # Jobs held and not started go back at once: nothing here will run them now.
        while not self._ready.empty():
            self._chore(self._hand_back_unstarted(self._ready.get_nowait()))

    def _answered(self, started: float) -> None:
        """A handler that started at loop time ``started`` got past its dependency (it
        returned, or failed for another reason): a wait it started within ends."""
        if self._outage is not None and started >= self._outage_at:
            self._resume("a job got through")

    def _resume(self, why: str) -> None:
        loop = asyncio.get_running_loop()
        log.info(
            "the dependency answers again (%s) after %.1f s: claiming again",
            why,
            loop.time() - self._outage_at,
            extra={"worker_id": self.worker_id},
        )
        self._outage = None
        self._resumed_at = loop.time()
        self._resumed.set()
        self._room.set()
        self._busy.set()  # beat soon: the row no longer says "waiting"

    def _chore(self, aw: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(aw)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _hand_back_unstarted(self, claim: Claim) -> None:
        try:
            if await self._release_with_retries(claim):
                self.unavailable += 1
        finally:
            self._forget(claim)

    async def _release_with_retries(self, claim: Claim) -> bool:
        """``release`` retried on errors within the job's lease (the lease keeper renews
        it meanwhile); True once released, False when stale or given up."""
        key = _key(claim)
        self._finishing.add(key)
        backoff = Backoff(first=0.1)
        trouble = _Trouble(f"release of {claim.job_id}")
        try:
            while True:
                try:
                    ok = await self.queue.jobs.release(claim.job_id, claim.token)
                    break
                except Exception as e:  # noqa: BLE001 - any error: retry within the lease
                    if self._give_up(key):
                        log.warning(
                            "job %s: could not hand it back within its lease (%s);"
                            " left to the reaper",
                            claim.job_id,
                            e,
                        )
                        self.stale += 1
                        return False
                    trouble.note(e)
                    await backoff.sleep()
        finally:
            self._stuck.pop(key, None)
            self._finishing.discard(key)
        if ok:
            self.released += 1
        else:
            self.stale += 1
        await self._hooks.released(claim, ok)
        return ok

    def _suspect_hold(self) -> float | None:
        """Seconds this consumer still holds off claiming for the suspects it holds (jobs
        whose holder died before): until each is done, for at most ``suspect_ms`` after
        it started; None when no suspect holds it back."""
        now = asyncio.get_running_loop().time()
        hold: float | None = None
        for key, claim in self._held.items():
            if not claim.stalls or key in self._lost:
                continue
            started = self._started.get(key, now)
            left = started + self.suspect_ms / 1000 - now
            if left > 0:
                hold = left if hold is None else max(hold, left)
        return hold

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
            # The token is read from the row, so it may be someone else's by now (the job
            # was reaped and claimed again): the release names us as the holder, and is
            # stale unless the lease is still ours.
            token = await conn.hget(self.queue.keys.job(job_id), "attempts")
            if token is not None and await self.queue.jobs.release(
                job_id, int(token), worker_id=self.worker_id
            ):
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
        try:
            if self._park_conn is None:
                self._park_conn = await _blocking_twin(self.queue.conn, self.queue.keys.wake)
            parked = self._park_conn.blpop([self.queue.keys.wake], timeout=timeout_ms / 1000)
            if not await self._until(parked, self._kick):
                # Stopping or kicked mid-BLPOP: drop the blocked connection (our own, never
                # the shared one) rather than trust the cancelled read to leave it clean.
                await self._drop_park_conn()
            self._park_trouble.ok()
        except Exception as e:  # noqa: BLE001 - any error: claim again after a pause
            self._park_trouble.note(e)
            await self._drop_park_conn()  # broken, or its node no longer serves the key
            await self._until(asyncio.sleep(min(1.0, timeout_ms / 1000)))

    async def _drop_park_conn(self) -> None:
        conn, self._park_conn = self._park_conn, None
        if conn is not None and conn is not self.queue.conn:
            with contextlib.suppress(Exception):
                await conn.aclose()

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
        # A slot never dies of a job: whatever goes wrong with one is logged, and the job
        # left to its lease (the reaper takes it back; fencing keeps that safe).
        while True:
            claim = await self._ready.get()
            try:
                if _key(claim) in self._lost:
                    self._forget(claim)
                    continue
                await self._process(claim)
            except Exception:
                log.exception("job %s: unexpected error; left to its lease", claim.job_id)
                self._forget(claim)

    async def _call(self, claim: Claim) -> Any:
        # A handler may return any awaitable (a coroutine, a future); a task needs a
        # coroutine, so it runs this one. The handler inside its hooks' around_handler.
        return await self._handle(claim)

    async def _process(self, claim: Claim) -> None:
        key = _key(claim)
        loop = asyncio.get_running_loop()
        started = self._started[key] = loop.time()
        self._room.set()  # a suspect's hold counts from now: the claimer looks again
        task: asyncio.Task[Any] = asyncio.create_task(
            self._call(claim), name=f"handler-{claim.job_id}"
        )
        self._running[key] = task
        try:
            verdict = await self._await_handler(key, task)
            if verdict == "abandoned" or key in self._lost:
                return  # the lease went to someone else: no side effect of ours counts
            if verdict == "timed out":
                self.timed_out += 1
                self._finishing.add(key)
                self._answered(started)
                await self._fail(claim, TimedOut("timed out"))
                return
            try:
                result = task.result()
            except asyncio.CancelledError:
                # The handler cancelled itself (or something else did): a failed attempt.
                self._finishing.add(key)
                self._answered(started)
                await self._fail(claim, HandlerCancelled("the handler was cancelled"))
                return
            except Unavailable as e:
                # What the handler needs is down: hand the job back, spend nothing, and
                # claim nothing more until it answers again.
                self._enter_outage(started, e)
                if await self._release_with_retries(claim):
                    self.unavailable += 1
                return
            except Exception as e:  # noqa: BLE001 - any handler failure: retry or dead-letter
                self._finishing.add(key)
                self._answered(started)
                await self._fail(claim, e)
                return
            self._answered(started)
            try:
                # Encoded here, before the completion joins a pipelined batch: a result
                # JSON cannot carry fails this one job and no other.
                encoded = encode_result(result)
            except Exception as e:  # noqa: BLE001 - orjson raises TypeError subclasses
                self._finishing.add(key)
                await self._fail(
                    claim,
                    ResultNotEncodable(
                        f"the handler's result cannot be stored as JSON ({type(e).__name__}: {e})"
                    ),
                )
                return
            if await self._complete(claim, encoded):
                self.completed += 1
            else:
                self.stale += 1
        finally:
            self._running.pop(key, None)
            self._started.pop(key, None)
            self._probes.discard(key)
            self._finishing.discard(key)
            self._forget(claim)

    async def _await_handler(self, key: _Key, task: asyncio.Task[Any]) -> str:
        """Wait for a handler: ``"done"`` when it ended (its result or error is the task's),
        ``"timed out"`` when it ran past ``timeout_ms`` (it is cancelled), ``"abandoned"``
        when its lease was lost and it did not unwind within a second of the cancel. A
        cancelled handler that does not unwind is left behind: it holds neither its job
        nor its slot."""
        # One future woken by whichever comes first: the handler's end (a done callback),
        # its lease lost (_cancel_lost) or its deadline (a timer). This is the hot path of
        # every job: a task waiting on an Event plus asyncio.wait cost ~3 more loop
        # callbacks and a task per job.
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        task.add_done_callback(wake)
        self._lost_signal[key] = wake
        timer = None
        if self.timeout_ms is not None:
            timer = loop.call_later(self.timeout_ms / 1000, wake)
        if key in self._lost:
            wake()  # lost before this wait began
        try:
            await woken
        except asyncio.CancelledError:
            task.cancel()  # the slot itself is being stopped: its handler with it
            raise
        finally:
            task.remove_done_callback(wake)
            if timer is not None:
                timer.cancel()
            self._lost_signal.pop(key, None)
        if task.done():
            return "done"
        if key in self._lost:
            # Cancelled by the lease keeper (or a stop past its grace).
            await asyncio.wait({task}, timeout=_UNWIND_S)
            if task.done():
                return "done"
            log.error("job %s: its handler ignores cancellation; left behind", key[0])
            return "abandoned"
        task.cancel()  # past timeout_ms
        await asyncio.wait({task}, timeout=_UNWIND_S)
        if not task.done():
            log.error(
                "job %s: its handler ran past timeout_ms and ignores cancellation; the job"
                " is failed and the handler left behind",
                key[0],
            )
        return "timed out"

    def _cancel_lost(self, key: _Key) -> None:
        """Our lease of ``key`` is gone (or a stop's grace ran out): the handler must stop."""
        self._lost.add(key)
        task = self._running.get(key)
        if task is not None:
            task.cancel()  # stop a stale attempt's side effects at once
        wake = self._lost_signal.get(key)
        if wake is not None:
            wake()

    def _forget(self, claim: Claim) -> None:
        self._held.pop(_key(claim), None)
        self._lost.discard(_key(claim))
        self._room.set()

    async def _fail(self, claim: Claim, error: BaseException) -> None:
        retry_in = error.delay_ms if isinstance(error, Retry) else None
        if isinstance(retry_in, bool) or not isinstance(retry_in, int) or retry_in < 0:
            retry_in = None  # a nonsense delay asked for: the default backoff
        text = "timed out" if isinstance(error, TimedOut) else f"{type(error).__name__}: {error}"
        text = text[:2000]
        backoff = Backoff(first=0.1)
        trouble = _Trouble(f"fail of {claim.job_id}")
        key = _key(claim)
        try:
            while True:
                try:
                    outcome = await self.queue.jobs.fail(claim.job_id, claim.token, text, retry_in)
                    break
                except Exception as e:  # noqa: BLE001 - any error: retry within the lease
                    if self._give_up(key):
                        log.warning(
                            "job %s: could not record its failure within its lease"
                            " (%s); left to the reaper",
                            claim.job_id,
                            e,
                        )
                        self.stale += 1
                        return
                    trouble.note(e)
                    await backoff.sleep()
        finally:
            self._stuck.pop(key, None)
        if outcome == "stale":
            self.stale += 1
        else:
            self.failed += 1
        await self._hooks.failed(claim, error, outcome)
        # One line per failure, with the ids as fields for JSON logs; "dead" is the one an
        # operator must act on, so it is a warning.
        log.log(
            logging.WARNING if outcome == "dead" else logging.INFO,
            "job %s failed (%s): %s",
            claim.job_id,
            outcome,
            text,
            extra={"job_id": claim.job_id, "worker_id": self.worker_id},
        )

    def _give_up(self, key: _Key) -> bool:
        """Note that ``key``'s outcome met an error; True once its lease has surely run out
        (no renewal for ``lease_ms``): the job is the reaper's, and a late call would only
        be stale."""
        now = asyncio.get_running_loop().time()
        return now >= self._stuck.setdefault(key, now + self.lease_ms / 1000)

    async def _complete(self, claim: Claim, encoded: bytes) -> bool:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        # From here on the lease keeper leaves the job alone (unless its completion gets
        # stuck): an extend racing the completion on another connection would be refused
        # for a lease that was simply finished.
        self._finishing.add(_key(claim))
        self._outbox.append(_Done(claim.job_id, claim.token, encoded, fut))
        self._outbox_ready.set()
        try:
            return await fut
        finally:
            self._finishing.discard(_key(claim))
            self._stuck.pop(_key(claim), None)

    async def _flush_loop(self) -> None:
        """Send finished jobs' completions in pipelined batches: whatever piled up while
        the previous batch was in flight goes in the next one.

        A batch that errs is sent again (complete is idempotent for its own token, so the
        jobs it did complete report True again); after a server error (not a broken
        connection) each item goes alone, so one bad item cannot hold the others back.
        Meanwhile the lease keeper renews the stuck jobs' leases; an item whose lease
        could not be renewed for ``lease_ms`` is given up: the job is the reaper's, and
        the completion would be stale anyway."""
        backoff = Backoff(first=0.1)
        trouble = _Trouble("complete")
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            items, self._outbox = self._outbox, []
            alone = False
            while items:
                if alone:
                    answers: list[Any] = await asyncio.gather(
                        *(
                            self._hooks.complete(
                                [(d.job_id, d.token, d.result)], self.queue.jobs.complete_encoded
                            )
                            for d in items
                        ),
                        return_exceptions=True,
                    )
                    outcome: list[bool | BaseException] = [
                        a if isinstance(a, BaseException) else a[0] for a in answers
                    ]
                else:
                    try:
                        outcome = list(
                            await self._hooks.complete(
                                [(d.job_id, d.token, d.result) for d in items],
                                self.queue.jobs.complete_encoded,
                            )
                        )
                    except Exception as e:  # noqa: BLE001 - retried below
                        outcome = [e] * len(items)
                left = []
                for d, verdict in zip(items, outcome, strict=True):
                    if d.fut.done():
                        continue
                    if isinstance(verdict, BaseException):
                        trouble.note(verdict)
                        alone = alone or not isinstance(verdict, TRANSIENT)
                        if self._give_up((d.job_id, d.token)):
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

    # -- leases, heartbeat, reaper ----------------------------------------------

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None]]) -> None:
        # Loops on a flag as well as on cancellation: a cancel that lands inside the client
        # library mid-command can be swallowed there, and the loop must still end.
        loop = asyncio.get_running_loop()
        trouble = _Trouble(fn.__name__.strip("_"))
        while not self._closing.is_set():
            started = loop.time()
            try:
                await fn()
                trouble.ok()
            except Exception as e:  # noqa: BLE001 - any error: the loop must go on
                trouble.note(e)
            # Start to start, never later than the interval: the re-claim bound (lapse +
            # reap interval) and the beats' margin inside the lapse are built on it. The
            # jitter, which keeps processes from beating in step, only makes it earlier.
            pause = max(
                0.0, interval_ms / 1000 * random.uniform(0.8, 1.0) - (loop.time() - started)
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), pause)

    async def _keep_leases(self) -> None:
        # Running and waiting jobs, and finished ones whose outcome is stuck on errors
        # (their verdicts never count as lost: the outcome itself may just have landed).
        held = [c for k, c in self._held.items() if k not in self._finishing or k in self._stuck]
        if not held:
            return
        verdicts = await self.queue.jobs.extend_many(
            [(c.job_id, c.token) for c in held], self.lease_ms
        )
        await self._hooks.extended(held, verdicts)
        renewed_until = asyncio.get_running_loop().time() + self.lease_ms / 1000
        for claim, ok in zip(held, verdicts, strict=True):
            key = _key(claim)
            if ok and key in self._stuck:
                self._stuck[key] = renewed_until
            if not ok and key in self._held and key not in self._lost | self._finishing:
                self.lost += 1
                self._cancel_lost(key)
                log.warning("lease of %s lost; handler cancelled", claim.job_id)

    async def _beat_loop(self) -> None:
        """Heartbeats, start to start: every ``heartbeat_ms`` while the server counts
        this worker busy (it holds jobs: the short lapse applies), every
        ``idle_heartbeat_ms`` while it holds none. A claim while idle moves the deadline
        back to the short lapse on the server and switches this loop to the busy cadence
        at once."""
        loop = asyncio.get_running_loop()
        trouble = _Trouble("heartbeat")
        while not self._closing.is_set():
            started = loop.time()
            interval = self.heartbeat_ms
            self._busy.clear()
            try:
                applied = await self._beat()
                trouble.ok()
                if applied > self.lapse_ms and not self._held:
                    interval = self.idle_heartbeat_ms
            except Exception as e:  # noqa: BLE001 - any error: beat again soon
                trouble.note(e)
            pause = interval / 1000 * random.uniform(0.8, 1.0) - (loop.time() - started)
            if interval > self.heartbeat_ms:
                woken = await self._wait_any(pause, self._closing, self._busy)
                if self._busy.is_set():
                    pause = self.heartbeat_ms / 1000 * random.uniform(0.8, 1.0) - woken
                else:
                    continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), max(0.0, pause))

    async def _wait_any(self, timeout: float, *events: asyncio.Event) -> float:
        """Wait until one of ``events`` is set or ``timeout`` s passed; returns the time
        waited."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        waits = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(
                waits, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for w in waits:
                w.cancel()
        return loop.time() - t0

    async def _beat(self) -> int:
        meta: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state": "busy" if self._running else "idle",
            "jobs": ",".join(job_id for job_id, _ in self._running),
            "jobs_done": self.completed,
            "waiting_for": self._outage or "",
        }
        if self.meta is not None:
            meta.update(self.meta())
        if self._outage is not None:
            meta["state"] = "waiting"  # whatever the handler's side says: we claim nothing
        _, applied = await self.queue.beat(
            self.worker_id,
            self.lapse_ms,
            meta,
            idle_lapse_ms=self.idle_lapse_ms,
            gap_ms=self.pulse_gap_ms,
        )
        return applied

    async def _reap_loop(self) -> None:
        """The queue's one reaper, if this consumer holds (or takes) the reaper lock.

        As holder it reaps when something can next come due (the earliest lease deadline,
        heartbeat deadline or due time), never more often than ``reap_interval_ms`` and
        never later than ``lapse_ms`` after the last turn (a job claimed meanwhile comes
        due no sooner than its holder's lapse). So the bound on a dead holder's job is
        unchanged, its deadline + ``reap_interval_ms``, while an idle queue is reaped
        once per lapse. Others try again when the lock may free up, so a dead holder is
        replaced within ``reap_lock_ms``."""
        loop = asyncio.get_running_loop()
        trouble = _Trouble("reaper")
        while not self._closing.is_set():
            started = loop.time()
            try:
                sweep = await self.queue.stalled.sweep(
                    self.worker_id,
                    self.reap_lock_ms,
                    horizon_ms=self.lapse_ms,
                    margin_ms=self.reap_interval_ms,
                    gap_ms=self.pulse_gap_ms,
                )
                trouble.ok()
                for job_id in sweep.moved:
                    log.info(
                        "reaped %s: its holder was presumed dead",
                        job_id,
                        extra={"job_id": job_id},
                    )
                if sweep.moved:
                    # The jobs are back on their lanes and their wake token is on the wake
                    # key, but the consumer parked longest may be the very holder presumed
                    # dead: a frozen (SIGSTOPped, paused) process keeps its BLPOP
                    # registered and swallows the token, leaving the live ones parked until
                    # park_max_ms. So the consumer that hosts the reaper claims at once.
                    self._kick.set()
                if sweep.leader:
                    # The jitter only makes a turn earlier; +2 ms: land past the deadline.
                    pause_ms = max(
                        self.reap_interval_ms * random.uniform(0.8, 1.0),
                        min(sweep.wait_ms + 2, self.lapse_ms),
                    )
                else:
                    pause_ms = max(10, sweep.wait_ms) + random.uniform(1, 20)
            except Exception as e:  # noqa: BLE001 - any error: try again next interval
                trouble.note(e)
                pause_ms = self.reap_interval_ms
            pause = pause_ms / 1000 - (loop.time() - started)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closing.wait(), max(0.0, pause))

    # -- stopping -----------------------------------------------------------------

    async def _drain(self, runners: list[asyncio.Task[None]]) -> None:
        if self._chores:  # hand-backs in flight (a dependency went down): let them land
            await asyncio.wait(list(self._chores), timeout=self.grace_ms / 1000 + 1)
        # Prefetched jobs never started: hand them back untouched.
        while not self._ready.empty():
            claim = self._ready.get_nowait()
            await self._release(claim)
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=self.grace_ms / 1000)
        for key, task in list(self._running.items()):
            if task.done():
                continue  # finished in time: its completion (or failure) is on its way
            held = self._held.get(key)
            self._cancel_lost(key)  # our handler must not count any more
            if held is not None:
                await self._release(held)
        # Let the finished jobs' completions land before the flusher is cancelled.
        deadline = asyncio.get_running_loop().time() + 10
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def _release(self, claim: Claim) -> None:
        try:
            ok = await self.queue.jobs.release(claim.job_id, claim.token)
        except Exception as e:  # noqa: BLE001 - best effort: the lease runs out instead
            log.warning("release of %s failed (%s); its lease will run out", claim.job_id, e)
        else:
            if ok:
                self.released += 1
            await self._hooks.released(claim, ok)
        self._held.pop(_key(claim), None)
