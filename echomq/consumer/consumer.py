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
instead of polling, its next claim pipelined behind the BLPOP so that Valkey runs it as a
job arrives (:mod:`~echomq.park`). It also hosts its process's heartbeat and reaper.

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

How it is built: this module is the orchestrator (claiming, running handlers, stopping);
each other idea is a part of its own, with its own tests: :mod:`~echomq.options` (the
checked settings), :mod:`~echomq.claims` (one record and one state per held claim),
:mod:`~echomq.leases` (the lease keeper), :mod:`~echomq.outcomes` (complete, fail,
release, each within the lease), :mod:`~echomq.outbox` (batched completions),
:mod:`~echomq.heartbeat` (liveness), :mod:`~echomq.reaper` (the reaper election),
:mod:`~echomq.park` (the BLPOP when idle), :mod:`~echomq.outage` (a dependency down) and
:mod:`~echomq.running` (awaiting one handler).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, overload

from redis.exceptions import TimeoutError as RedisTimeoutError

from ..backoff import Backoff
from ..errors import Unavailable
from ..hooks import HookChain, Hooks, checked
from ..jobs import decode_batch, encode_result, mint_claim_id
from ..queue import Queue
from ..types import Claim, ClaimBatch
from .claims import ClaimRecord, ClaimTracker, Key, key_of, split_suspects
from .heartbeat import Heartbeat
from .leases import LeaseKeeper
from .options import ConsumerOptions, Source
from .outage import HAND_BACKS, HandedBackTooOften, Outage
from .outcomes import Counts, HandlerCancelled, Outcomes, ResultNotEncodable, TimedOut
from .park import Park, Woken
from .reaper import Reaper, seats
from .running import await_handler
from .trouble import Trouble
from .waits import every, until, wait_any

log = logging.getLogger("echomq.consumer")

Handler = Callable[[Claim], Awaitable[Any]]
__all__ = ["Consumer", "Handler", "HandlerCancelled", "ResultNotEncodable", "Source", "TimedOut"]


class _Count:
    """A consumer's counter, read from (and written to) its :class:`~echomq.outcomes.Counts`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, consumer: None, owner: type) -> _Count: ...
    @overload
    def __get__(self, consumer: Consumer, owner: type | None = None) -> int: ...
    def __get__(self, consumer: Consumer | None, owner: type | None = None) -> int | _Count:
        if consumer is None:
            return self  # looked up on the class
        value: int = getattr(consumer._counts, self.name)
        return value

    def __set__(self, consumer: Consumer, value: int) -> None:
        setattr(consumer._counts, self.name, value)


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
            job is a job another worker cannot take). A job whose handler returned frees
            its slot at once and is held until its completion's verdict is in; up to
            ``concurrency`` such jobs count against neither, so the next batch is claimed
            and runs while the last one's completions travel.
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
    error) ends the wait, as does a ``probe`` that returns. A job probe needs a job: with
    the queue empty the wait lasts until one arrives (and that one is claimed the moment
    it wakes the consumer). Meanwhile the worker's row says ``state: waiting``
    (:attr:`waiting`).

    A job whose holder died before (a suspect, ``Claim.stalls > 0``) runs alone: while it
    is held this consumer claims nothing more, but for at most ``min(lease_ms,
    timeout_ms)`` after it started, so a suspect that hangs never stops the consumer.

    A claim whose reply does not arrive within the connection's ``socket_timeout`` (too
    many large payloads) halves the batch for the next claims; each claim that fills the
    smaller batch lets it grow back by one, up to ``batch``.
    """

    # What it did, for tests and for the worker's self-description.
    completed = _Count()
    failed = _Count()
    stale = _Count()
    lost = _Count()
    released = _Count()
    timed_out = _Count()  # handlers cancelled after timeout_ms (each also in failed)
    unavailable = _Count()  # jobs handed back because a dependency was down

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
        if probe is not None and not callable(probe):
            raise TypeError("probe must be an async callable taking no argument")
        o = self.options = ConsumerOptions.of(
            lease_ms=lease_ms,
            concurrency=concurrency,
            worker_id=worker_id,
            source=source,
            batch=batch,
            prefetch=prefetch,
            heartbeat_ms=heartbeat_ms,
            lapse_ms=lapse_ms,
            reap_interval_ms=reap_interval_ms,
            park_max_ms=park_max_ms,
            idle_heartbeat_ms=idle_heartbeat_ms,
            grace_ms=grace_ms,
            reaper=reaper,
            timeout_ms=timeout_ms,
            probe_max_ms=probe_max_ms,
        )
        self.queue = queue
        self.handler = handler
        self.meta = meta
        self.probe = probe
        self.hooks = checked(hooks)
        # The settings as attributes too (read them, do not set them: the parts read
        # ``options``).
        self.lease_ms, self.concurrency, self.worker_id = o.lease_ms, o.concurrency, o.worker_id
        self.source, self.batch, self.prefetch = o.source, o.batch, o.prefetch
        self.heartbeat_ms, self.lapse_ms = o.heartbeat_ms, o.lapse_ms
        self.reap_interval_ms, self.park_max_ms = o.reap_interval_ms, o.park_max_ms
        self.idle_heartbeat_ms, self.idle_lapse_ms = o.idle_heartbeat_ms, o.idle_lapse_ms
        self.reap_lock_ms, self.pulse_gap_ms = o.reap_lock_ms, o.pulse_gap_ms
        self.grace_ms, self.reaper, self.timeout_ms = o.grace_ms, o.reaper, o.timeout_ms
        self.probe_max_ms, self.suspect_ms = o.probe_max_ms, o.suspect_ms
        self._hooks = HookChain((*queue.hooks, *self.hooks))  # again at run()
        self._handle = self._hooks.wrap(handler)
        # The parts.
        self._counts = Counts()
        self._tracker = ClaimTracker()
        self._outage = Outage()
        self._stopping = asyncio.Event()  # stop(): claim no more, drain
        self._closing = asyncio.Event()  # drained: background loops end
        self._room = asyncio.Event()  # a held claim finished or started: look again
        # Our reaper moved jobs, or a wait began: claim (or probe) now, do not park.
        self._kick = asyncio.Event()
        self._outcomes = Outcomes(
            queue, self._tracker, o.lease_ms, o.worker_id, lambda: self._hooks, self._counts
        )
        self._leases = LeaseKeeper(
            queue, self._tracker, o.lease_ms, self._on_lost, lambda: self._hooks
        )
        self._heartbeat = Heartbeat(
            queue, o, self._describe, lambda: len(self._tracker) > 0, self._closing
        )
        self._park = Park(queue, self._until)
        self._side = queue.lanes if o.source == "lanes" else queue.jobs
        self._ready: asyncio.Queue[Claim] = asyncio.Queue()
        self._chores: set[asyncio.Task[Any]] = set()  # releases sent in the background
        # Jobs whose handler returned, their completion's verdict not yet in: they hold no
        # slot, and up to `concurrency` of them take no room from the claimer either, so
        # the next batch runs (and is claimed) while the last one's completions travel.
        self._completing = 0
        # Claim size now: halved when a claim's reply does not arrive in time.
        self._batch_now = o.batch
        self._claimer: asyncio.Task[None] | None = None

    # -- public -----------------------------------------------------------

    @property
    def in_flight(self) -> list[Claim]:
        """Jobs this consumer holds right now (running or prefetched)."""
        return self._tracker.claims()

    @property
    def running(self) -> list[Claim]:
        """Jobs whose handler has not returned yet: no outcome of theirs has been sent, so
        a crash now leaves each of them leased to this worker until it is reclaimed."""
        return [r.claim for r in self._tracker.running()]

    @property
    def waiting(self) -> bool:
        """True while a dependency is down: this consumer claims nothing but its probe."""
        return self._outage.active

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
        reapers = seats()
        owns_reaper = self.reaper and reapers.take(self.queue.name)
        background = [
            asyncio.create_task(self._heartbeat.run(), name="heartbeat"),
            asyncio.create_task(
                every(self.lease_ms // 3, self._leases.renew, self._closing, "keep_leases"),
                name="leases",
            ),
            asyncio.create_task(self._flush_loop(), name="completions"),
        ]
        if owns_reaper:
            reaper = Reaper(self.queue, self.options, self._closing, self._kick)
            background.append(asyncio.create_task(reaper.run(), name="reaper"))
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
            await self._drain()
        finally:
            self._closing.set()
            self._stopping.set()
            for t in everything:
                t.cancel()
            _, stuck = await asyncio.wait(everything, timeout=5)
            for t in stuck:  # should not happen; never let shutdown hang on it
                log.error("task %s did not stop", t.get_name())
            if owns_reaper:
                reapers.leave(self.queue.name)
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            try:
                await self.queue.unregister(self.worker_id)
            except Exception as e:  # noqa: BLE001 - best effort: the registry entry lapses
                log.warning("unregister failed (%s)", e)
            await self._park.drop()

    async def _flush_loop(self) -> None:
        await self._outcomes.outbox.flush_forever()

    def _describe(self) -> dict[str, Any]:
        """The worker's registry row, written at each beat."""
        started = [r for r in self._tracker if r.task is not None]
        meta: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state": "busy" if started else "idle",
            "jobs": ",".join(r.claim.job_id for r in started),
            "jobs_done": self.completed,
            "waiting_for": self._outage.why or "",
        }
        if self.meta is not None:
            meta.update(self.meta())
        if self._outage.active:
            meta["state"] = "waiting"  # whatever the handler's side says: we claim nothing
        return meta

    # -- claiming -----------------------------------------------------------

    def _claim(self, count: int, claim_id: str | None = None) -> Awaitable[ClaimBatch]:
        return self._side.claim_many(self.worker_id, self.lease_ms, count, claim_id=claim_id)

    def _free_room(self) -> int:
        """Jobs the claimer may take now: free slots and prefetch, plus finished jobs still
        awaiting their completion's verdict (up to ``concurrency`` of them)."""
        return (
            self.concurrency
            + self.prefetch
            - len(self._tracker)
            + min(self._completing, self.concurrency)
        )

    def _claim_size(self, room: int, careful: bool) -> int:
        """Jobs to ask for with ``room`` free: one after a claim brought a stalled job (it
        may be what killed a worker), else the batch, as far as there is room."""
        return 1 if careful else min(room, self._batch_now)

    async def _claim_loop(self) -> None:
        backoff = Backoff(first=0.1)
        trouble = Trouble("claim")
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
        epoch = self._outage.epoch
        # A probe claim came back empty and the claimer parked since: the park was the
        # pause, and the job that woke it is the probe, to be claimed before another
        # worker's claim takes it (a pause here lost that race to every arrival, and the
        # wait outlived the outage for as long as others kept the queue empty).
        probe_now = False
        # The claim that rode behind the last park (echomq.park): its count and answer, or,
        # when the answer was lost, its count and id to ask again with (the same id answers
        # the jobs it leased, if it ran). Either is taken before anything else: an outage
        # that began meanwhile hands its jobs back below, as any claim's.
        behind: tuple[int, ClaimBatch] | None = None
        lost: tuple[int, str | None] | None = None
        try:
            # Only the claimer blocks on BLPOP, on a connection of its own from the pool.
            while not self._stopping.is_set():
                probing = False
                at_once, probe_now = probe_now, False  # good for the next probe only
                if behind is not None:
                    (asked, got), behind = behind, None
                else:
                    if lost is not None:
                        (asked, claim_id), lost = lost, None
                    else:
                        claim_id = None
                        if self._outage.active:
                            if epoch != self._outage.epoch:  # a new wait: probe soon, back off
                                epoch = self._outage.epoch
                                probes.reset()
                            if not await self._await_dependency(probes, at_once=at_once):
                                continue
                            probing = True
                        room = self._free_room()
                        hold = self._suspect_hold()
                        if room <= 0 or hold is not None:
                            self._room.clear()
                            if hold is None:
                                await self._until(self._room.wait())
                            else:  # a suspect runs: claim more once done, or run long enough
                                await wait_any(hold, self._room, self._stopping)
                            continue
                        asked = 1 if probing else self._claim_size(room, careful)
                    self._kick.clear()
                    try:
                        if unsure:
                            await self._release_orphans()
                            unsure = False
                        # A probe claim asks for one more job: the one that began the
                        # wait, first in fair order again, is the probe only when alone.
                        spare = 1 if probing and self._outage.tripped_by else 0
                        got = await self._claim(asked + spare, claim_id)
                        backoff.reset()
                        trouble.ok()
                    except Exception as e:  # noqa: BLE001 - any error: the claimer must go on
                        trouble.note(e)
                        unsure = True  # what a lost re-ask (claim_id) leased is released too
                        if isinstance(e, (RedisTimeoutError, asyncio.TimeoutError)) and asked > 1:
                            # The reply may be too large to read in time (big payloads): the
                            # same claim again would time out again, on the same lanes' jobs.
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
                    self._heartbeat.busy.set()
                    careful = any(c.stalls for c in got.claims)
                    await self._hooks.claimed(got.claims)
                if self._outage.active and not probing:
                    # Claimed as the outage began: hand it all back, untouched.
                    for claim in got.claims:
                        self._tracker.hold(claim)
                        self._chore(self._hand_back_unstarted(claim))
                    continue
                if probing:
                    got = self._one_probe(got)
                kept, extra = split_suspects(got.claims)
                if extra:
                    # Handed back before the kept ones may start: a kept job that kills this
                    # process must not take a release still in flight down with it.
                    unsure = await self._outcomes.release_suspects(extra) or unsure
                for claim in kept:
                    self._tracker.hold(claim)
                    self._ready.put_nowait(claim)
                if not extra and len(got.claims) < asked:
                    # Let the slots start what this claim brought before the park is built.
                    await asyncio.sleep(0)
                    # The next claim rides behind the park, unless it must be a probe (an
                    # outage: probes have their own pace) or no room is left for one.
                    room = self._free_room()
                    ride = not probing and room > 0 and self._suspect_hold() is None
                    count = self._claim_size(room, careful) if ride else 0
                    claim_id = mint_claim_id() if ride else None
                    woken = await self._park_until_woken(got, count, claim_id)
                    if woken.reply is not None:
                        behind = (count, decode_batch(woken.reply))
                    elif woken.lost:
                        lost = (count, claim_id)
                    probe_now = probing and not got.claims
        finally:
            if behind is not None or lost is not None:
                # Stopping with a claim behind the park taken or in doubt: hand back what
                # it leased (the jobs we hold nothing of), rather than let them lapse.
                try:
                    await self._release_orphans()
                except Exception as e:  # noqa: BLE001 - best effort: their leases lapse
                    log.warning("could not release a last claim's jobs (%s)", e)

    async def _await_dependency(self, probes: Backoff, *, at_once: bool = False) -> bool:
        """While a dependency is down: True when one job may be claimed as the probe,
        False to look again (the wait ended, or a probe of ``self.probe`` ran). ``at_once``:
        the last probe claim found nothing and the claimer has parked since, so the next
        one goes without a pause."""
        outage = self._outage
        if self.probe is not None:
            pause = probes.next_delay() * random.uniform(0.5, 1.0)
            await self._until(asyncio.sleep(pause), outage.resumed)
            if not outage.active or self._stopping.is_set():
                return False
            epoch = outage.epoch
            try:
                if not await self._until(self.probe()):
                    return False  # stopping
            except Exception as e:  # noqa: BLE001 - still down, whatever it says
                log.debug("probe: still unavailable (%s: %s)", type(e).__name__, e)
                return False
            if epoch == outage.epoch:
                self._resume("the probe answered")
            return False
        now = asyncio.get_running_loop().time()
        if any((r.started or now) >= outage.since for r in self._tracker):
            # A job taken since the wait began is on its way: its outcome is the probe.
            # (Handlers from before the wait do not hold the probe back: one may hang.)
            self._room.clear()
            await self._until(self._room.wait(), outage.resumed)
            return False
        if not at_once:
            pause = probes.next_delay() * random.uniform(0.5, 1.0)
            await self._until(asyncio.sleep(pause), outage.resumed)
        return outage.active and not self._stopping.is_set()

    def _enter_outage(self, started: float, error: Unavailable, job_id: str) -> None:
        """A handler of ``job_id`` that started at loop time ``started`` raised
        ``Unavailable``: wait, unless it started before the last wait ended (old news)."""
        if not self._outage.begin(started, error, asyncio.get_running_loop().time(), job_id):
            return
        self._heartbeat.busy.set()  # beat soon: the row says "waiting"
        # A claimer parked on the wake key must start probing now: the token the hand-back
        # leaves may wake another worker, and the park lasts up to park_max_ms.
        self._kick.set()
        log.warning(
            "a dependency is unavailable (%s): claiming nothing until it answers",
            self._outage.why,
            extra={"worker_id": self.worker_id},
        )
        # Jobs held and not started go back at once: nothing here will run them now.
        while not self._ready.empty():
            self._chore(self._hand_back_unstarted(self._ready.get_nowait()))

    def _answered(self, started: float) -> None:
        """A handler that started at loop time ``started`` got past its dependency (it
        returned, or failed for another reason): a wait it started within ends."""
        if self._outage.answered_by(started):
            self._resume("a job got through")

    def _resume(self, why: str) -> None:
        lasted = self._outage.end(asyncio.get_running_loop().time())
        log.info(
            "the dependency answers again (%s) after %.1f s: claiming again",
            why,
            lasted,
            extra={"worker_id": self.worker_id},
        )
        self._room.set()
        self._heartbeat.busy.set()  # beat soon: the row no longer says "waiting"

    def _one_probe(self, got: ClaimBatch) -> ClaimBatch:
        """The probe of a probe claim: its first job other than the one that began the
        wait, if any; the rest go back untouched (no delivery spent, no strike)."""
        if len(got.claims) < 2:
            return got
        tripped = self._outage.tripped_by
        probe = next((c for c in got.claims if c.job_id != tripped), got.claims[0])
        for claim in got.claims:
            if claim is not probe:
                self._tracker.hold(claim)
                self._chore(self._give_back(claim))
        return replace(got, claims=[probe])

    async def _give_back(self, claim: Claim) -> None:
        try:
            await self._outcomes.release(claim)
        finally:
            self._forget(claim)

    def _chore(self, aw: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(aw)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _hand_back_unstarted(self, claim: Claim) -> None:
        try:
            if await self._outcomes.release(claim):
                self.unavailable += 1
        finally:
            self._forget(claim)

    def _suspect_hold(self) -> float | None:
        """Seconds this consumer still holds off claiming for the suspects it holds (jobs
        whose holder died before): until each is done, for at most ``suspect_ms`` after
        it started; None when no suspect holds it back."""
        now = asyncio.get_running_loop().time()
        hold: float | None = None
        for record in self._tracker:
            if not record.claim.stalls or self._tracker.is_lost(key_of(record.claim)):
                continue
            left = (record.started or now) + self.suspect_ms / 1000 - now
            if left > 0:
                hold = left if hold is None else max(hold, left)
        return hold

    async def _release_orphans(self) -> None:
        """Hand back the jobs a claim whose answer was lost leased to us (see
        :meth:`~echomq.outcomes.Outcomes.release_orphans`)."""
        await self._outcomes.release_orphans({c.job_id for c in self._tracker.claims()})

    async def _park_until_woken(self, got: ClaimBatch, count: int, claim_id: str | None) -> Woken:
        """Park on the wake key, a claim of ``count`` jobs (under ``claim_id``) behind it
        when ``count`` > 0."""
        timeout_ms = self.park_max_ms
        if got.next_due_ms is not None:
            timeout_ms = min(timeout_ms, max(10, got.next_due_ms - got.server_now_ms))
        claim = (
            self._side.claim_call(self.worker_id, self.lease_ms, count, claim_id) if count else None
        )
        return await self._park.wait(timeout_ms, self._kick, claim)

    async def _until(self, aw: Awaitable[Any], *also: asyncio.Event) -> bool:
        """Await ``aw`` unless stop() (or one of ``also``) comes first; True when ``aw``
        finished."""
        return await until(aw, self._stopping, *also)

    # -- running --------------------------------------------------------------

    async def _run_slot(self) -> None:
        # A slot never dies of a job: whatever goes wrong with one is logged, and the job
        # left to its lease (the reaper takes it back; fencing keeps that safe).
        while True:
            claim = await self._ready.get()
            try:
                if self._tracker.is_lost(key_of(claim)):
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
        key = key_of(claim)
        started = asyncio.get_running_loop().time()
        task: asyncio.Task[Any] = asyncio.create_task(
            self._call(claim), name=f"handler-{claim.job_id}"
        )
        record = self._tracker.start(key, started, task)
        self._room.set()  # a suspect's hold counts from now: the claimer looks again
        handed_off = False
        try:
            verdict = await await_handler(record, task, self.timeout_ms)
            if verdict == "abandoned" or self._tracker.is_lost(key):
                return  # the lease went to someone else: no side effect of ours counts
            if verdict == "timed out":
                self.timed_out += 1
                self._answered(started)
                await self._outcomes.fail(claim, TimedOut("timed out"))
                return
            try:
                result = task.result()
            except asyncio.CancelledError:
                # The handler cancelled itself (or something else did): a failed attempt.
                self._answered(started)
                await self._outcomes.fail(claim, HandlerCancelled("the handler was cancelled"))
                return
            except Unavailable as e:
                # What the handler needs is down: hand the job back, spend nothing, and
                # claim nothing more until it answers again; unless the job is out of
                # strikes (others got through meanwhile): then it is the trouble, and fails.
                back = await self._outcomes.hand_back(claim, HAND_BACKS)
                if back == "exhausted":
                    await self._outcomes.fail(
                        claim,
                        HandedBackTooOften(
                            f"raised Unavailable {HAND_BACKS} times while other jobs"
                            f" completed (last: {e})"
                        ),
                    )
                    return
                self._enter_outage(started, e, claim.job_id)
                if back == "released":
                    self.unavailable += 1
                return
            except Exception as e:  # noqa: BLE001 - any handler failure: retry or dead-letter
                self._answered(started)
                await self._outcomes.fail(claim, e)
                return
            self._answered(started)
            try:
                # Encoded here, before the completion joins a pipelined batch: a result
                # JSON cannot carry fails this one job and no other.
                encoded = encode_result(result)
            except Exception as e:  # noqa: BLE001 - orjson raises TypeError subclasses
                await self._outcomes.fail(
                    claim,
                    ResultNotEncodable(
                        f"the handler's result cannot be stored as JSON ({type(e).__name__}: {e})"
                    ),
                )
                return
            # The slot moves on now; the claim is forgotten once the verdict is in (the
            # callback never runs before this returns: a future calls back from the loop).
            self._outcomes.complete_soon(claim, encoded, self._completed)
            handed_off = True
            self._completing += 1
            self._room.set()
        finally:
            if not handed_off:
                self._forget(claim)

    def _completed(self, claim: Claim) -> None:
        """A completion handed off by its slot has its verdict (or was given up)."""
        self._completing -= 1
        self._forget(claim)

    def _on_lost(self, record: ClaimRecord) -> None:
        """The lease keeper found ``record``'s lease gone: count it, stop its handler."""
        self.lost += 1
        self._cancel_lost(key_of(record.claim))

    def _cancel_lost(self, key: Key) -> None:
        """Our lease of ``key`` is gone (or a stop's grace ran out): the handler must stop."""
        record = self._tracker.lose(key)
        if record is None:
            return
        if record.task is not None:
            record.task.cancel()  # stop a stale attempt's side effects at once
        if record.wake is not None:
            record.wake()

    def _forget(self, claim: Claim) -> None:
        self._tracker.forget(key_of(claim))
        self._room.set()

    # -- stopping -----------------------------------------------------------------

    async def _drain(self) -> None:
        if self._chores:  # hand-backs in flight (a dependency went down): let them land
            await asyncio.wait(list(self._chores), timeout=self.grace_ms / 1000 + 1)
        # Prefetched jobs never started: hand them back untouched.
        while not self._ready.empty():
            claim = self._ready.get_nowait()
            await self._release(claim)
        running = self._tracker.running()
        if running:
            tasks = [r.task for r in running if r.task is not None]
            await asyncio.wait(tasks, timeout=self.grace_ms / 1000)
        for record in running:
            if record.task is None or record.task.done():
                continue  # finished in time: its completion (or failure) is on its way
            held = self._tracker.get(key_of(record.claim)) is record
            self._cancel_lost(key_of(record.claim))  # our handler must not count any more
            if held:
                await self._release(record.claim)
        # Let the finished jobs' completions land before the flusher is cancelled.
        deadline = asyncio.get_running_loop().time() + 10
        while self._started() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    def _started(self) -> bool:
        """True while a started job is still held (its handler or its outcome unfinished)."""
        return any(r.task is not None for r in self._tracker)

    async def _release(self, claim: Claim) -> None:
        await self._outcomes.release_once(claim)
        self._forget(claim)
