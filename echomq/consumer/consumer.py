"""``Consumer``: runs a handler over claimed jobs (how it is built: docs/api/consumer.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..errors import Unavailable
from ..hooks import HookChain, Hooks, checked
from ..jobs import encode_result
from ..queue import Queue
from ..types import Claim, ClaimBatch
from .claimer import Claimer
from .claims import ClaimRecord, ClaimTracker, Key, key_of
from .heartbeat import Heartbeat
from .leases import LeaseKeeper
from .options import OPTION_NAMES, ConsumerOptions, Source
from .outage import HAND_BACKS, HandedBackTooOften, Outage
from .outcomes import Counts, HandlerCancelled, Outcomes, ResultNotEncodable, TimedOut
from .park import Park
from .reaper import Reaper, seats
from .running import await_handler
from .scheduler import Scheduler
from .waits import every, until

log = logging.getLogger("echomq.consumer")

Handler = Callable[[Claim], Awaitable[Any]]


class Consumer:
    """Runs ``handler`` over a queue's jobs: claims under a lease, completes each job with
    the handler's return value under its fencing token, fails it on an exception (retried
    with backoff, dead after ``max_attempts``), and keeps the worker's heartbeat, the
    leases of running jobs and the queue's reaper going. Delivery is at least once: key a
    handler's effects on ``claim.job_id``. What it does when a dependency is down, with a
    suspect, or when a claim's reply is late: ``docs/api/consumer.md``.

    Args:
        queue: the :class:`~echomq.Queue` to consume.
        handler: ``async (Claim) -> result``; a result JSON cannot carry fails its job.
        lease_ms: each claim's lease, renewed while the handler runs (>= 100).
        concurrency: handlers running at once (>= 1).
        worker_id: a branded ``WRK_…`` id, minted when not given. Never reuse one.
        source: ``"lanes"`` (fair order over lanes) or ``"jobs"`` (the plain FIFO queue).
        batch: at most this many jobs leased per claim call.
        prefetch: jobs claimed beyond ``concurrency`` and held ready (a held job is one
            another worker cannot take).
        heartbeat_ms: beat interval while holding jobs; default once a second, or three
            times per ``lapse_ms`` when that is shorter. Must be < ``lapse_ms``.
        lapse_ms: after this long without a beat, a worker holding jobs is presumed dead
            and its jobs are reaped.
        reap_interval_ms: the reaper's shortest pause; a dead holder's job comes back
            within its deadline + this.
        park_max_ms: the longest BLPOP on the wake key when idle (>= 10).
        idle_heartbeat_ms: beat interval while holding nothing (>= ``heartbeat_ms``).
        grace_ms: on :meth:`stop`, how long running handlers may finish before their jobs
            are released; default ``lease_ms``.
        reaper: take part in the queue's reaper election.
        timeout_ms: a handler running this long is cancelled and its job failed with
            ``"timed out"``; None: no limit.
        probe_max_ms: the longest pause between two probes while a dependency is down
            (<= 5,000).
        meta: called at each beat; its fields are stored on the worker's registry row.
        probe: ``async () -> Any`` that raises while a dependency is still down; None: one
            job at a time is let through as the probe.
        hooks: :class:`~echomq.Hooks` run after the queue's own.
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
        timeout_ms: int | None = None,
        probe_max_ms: int = 1_000,
        meta: Callable[[], dict[str, Any]] | None = None,
        probe: Callable[[], Awaitable[Any]] | None = None,
        hooks: Iterable[Hooks] | None = None,
    ) -> None:
        given = locals()
        if not isinstance(queue, Queue):
            raise TypeError(f"queue must be an echomq.Queue, got {type(queue).__name__}")
        if not callable(handler):
            raise TypeError("handler must be an async callable taking a Claim")
        if probe is not None and not callable(probe):
            raise TypeError("probe must be an async callable taking no argument")
        o = self.options = ConsumerOptions(**{name: given[name] for name in OPTION_NAMES})
        self.queue = queue
        self.handler = handler
        self.meta = meta
        self.probe = probe
        self.hooks = checked(hooks)
        self.counts = Counts()
        self._hooks = HookChain((*queue.hooks, *self.hooks))  # again at run()
        self._handle = self._hooks.wrap(handler)
        self._tracker = ClaimTracker()
        self._outage = Outage()
        self._stopping = asyncio.Event()  # stop(): claim no more, drain
        self._closing = asyncio.Event()  # drained: background loops end
        self._room = asyncio.Event()  # a held claim finished or started: look again
        # Our reaper moved jobs, or a wait began: claim (or probe) now, do not park.
        self._kick = asyncio.Event()
        self._outcomes = Outcomes(
            queue, self._tracker, o.lease_ms, o.worker_id, lambda: self._hooks, self.counts
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
        # Returned handlers awaiting their completion's verdict (they take no slot).
        self._completing = 0
        self._claims = Claimer(self)
        self._claimer: asyncio.Task[None] | None = None

    @property
    def worker_id(self) -> str:
        return self.options.worker_id

    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    @property
    def in_flight(self) -> list[Claim]:
        """Jobs this consumer holds right now (running or prefetched)."""
        return self._tracker.claims()

    @property
    def running(self) -> list[Claim]:
        """Jobs whose handler has not returned yet."""
        return [r.claim for r in self._tracker.running()]

    @property
    def waiting(self) -> bool:
        """True while a dependency is down: this consumer claims nothing but its probe."""
        return self._outage.active

    @property
    def batch_now(self) -> int:
        """The claim size now (``batch``, or less after claims whose reply timed out)."""
        return self._claims.state.batch_now

    def stop(self) -> None:
        """Ask for a clean stop: claim nothing more, let running handlers finish within
        ``grace_ms``, release whatever is left, leave the registry."""
        # An event, not a cancel: a cancel landing inside the client library mid-command
        # can be swallowed there, and the claimer would park on with no one to wake it.
        self._stopping.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Consume until :meth:`stop` (or SIGTERM/SIGINT with ``install_signal_handlers``),
        then drain; ``RuntimeError`` if a background loop of it ends unexpectedly."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        self._hooks = HookChain((*self.queue.hooks, *self.hooks))  # hooks added since
        self._handle = self._hooks.wrap(self.handler)
        o = self.options
        reapers = seats()
        owns_reaper = o.reaper and reapers.take(self.queue.name)
        background = [
            asyncio.create_task(self._heartbeat.run(), name="heartbeat"),
            asyncio.create_task(
                every(o.lease_ms // 3, self._leases.renew, self._closing, "keep_leases"),
                name="leases",
            ),
            asyncio.create_task(self._flush_loop(), name="completions"),
        ]
        if owns_reaper:
            reaper = Reaper(self.queue, o, self._closing, self._kick)
            background.append(asyncio.create_task(reaper.run(), name="reaper"))
            # The queue's schedules run beside its reaper: one scheduler per queue per loop.
            background.append(
                asyncio.create_task(Scheduler(self.queue, o, self._closing).run(), name="scheduler")
            )
        runners = [
            asyncio.create_task(self._run_slot(), name=f"slot-{i}") for i in range(o.concurrency)
        ]
        self._claimer = asyncio.create_task(self._claims.run(), name="claimer")
        everything = [*runners, *background, self._claimer]
        try:
            # Only the claimer returns (after stop()); any other ending is a bug: raise
            # rather than claim and renew leases with no slot left to run the jobs.
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
            for t in stuck:  # never let shutdown hang on one
                log.error("task %s did not stop", t.get_name())
            if owns_reaper:
                reapers.leave(self.queue.name)
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            try:
                await self.queue.unregister(o.worker_id)
            except Exception as e:  # noqa: BLE001 - best effort: the registry entry lapses
                log.warning("unregister failed (%s)", e)
            await self._park.drop()

    async def _flush_loop(self) -> None:
        await self._outcomes.outbox.flush_forever()

    def _describe(self) -> dict[str, Any]:
        started = [r for r in self._tracker if r.task is not None]
        meta: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state": "busy" if started else "idle",
            "jobs": ",".join(r.claim.job_id for r in started),
            "jobs_done": self.counts.completed,
            "waiting_for": self._outage.why or "",
        }
        if self.meta is not None:
            meta.update(self.meta())
        if self._outage.active:
            meta["state"] = "waiting"  # whatever the handler's side says: we claim nothing
        return meta

    def _claim(self, count: int, claim_id: str | None = None) -> Awaitable[ClaimBatch]:
        o = self.options
        return self._side.claim_many(o.worker_id, o.lease_ms, count, claim_id=claim_id)

    async def _release_orphans(self) -> None:
        """Hand back what a claim whose answer was lost leased to us."""
        await self._outcomes.release_orphans({c.job_id for c in self._tracker.claims()})

    async def _until(self, aw: Awaitable[Any], *also: asyncio.Event) -> bool:
        """Await ``aw`` unless stop() (or one of ``also``) comes first; True if it finished."""
        return await until(aw, self._stopping, *also)

    def _enter_outage(self, started: float, error: Unavailable, job_id: str) -> None:
        """A handler that started at ``started`` raised ``Unavailable``: wait (unless old news)."""
        if not self._outage.begin(started, error, asyncio.get_running_loop().time(), job_id):
            return
        self._heartbeat.busy.set()  # beat soon: the row says "waiting"
        # A parked claimer must probe now: the hand-back's wake token may wake another.
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
        """A handler that started at ``started`` got past its dependency: the wait ends."""
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
                self.counts.unavailable += 1
        finally:
            self._forget(claim)

    async def _run_slot(self) -> None:
        # A slot never dies of a job: the job is left to its lease (fencing keeps it safe).
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
        # A handler may return any awaitable; a task needs a coroutine.
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
            verdict = await await_handler(record, task, self.options.timeout_ms)
            if verdict == "abandoned" or self._tracker.is_lost(key):
                return  # the lease went to someone else: no side effect of ours counts
            if verdict == "timed out":
                self.counts.timed_out += 1
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
                # Hand the job back and claim nothing more until the dependency answers,
                # unless the job is out of strikes: then it is the trouble, and fails.
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
                    self.counts.unavailable += 1
                return
            except Exception as e:  # noqa: BLE001 - any handler failure: retry or dead-letter
                self._answered(started)
                await self._outcomes.fail(claim, e)
                return
            self._answered(started)
            try:
                # Before it joins a batch: a result JSON cannot carry fails only its job.
                encoded = encode_result(result)
            except Exception as e:  # noqa: BLE001 - orjson raises TypeError subclasses
                await self._outcomes.fail(
                    claim,
                    ResultNotEncodable(
                        f"the handler's result cannot be stored as JSON ({type(e).__name__}: {e})"
                    ),
                )
                return
            # Forgotten at the verdict: a future's callback never runs before this returns.
            self._outcomes.complete_soon(claim, encoded, self._completed)
            handed_off = True
            self._completing += 1
            self._room.set()
        finally:
            if not handed_off:
                self._forget(claim)

    def _completed(self, claim: Claim) -> None:
        self._completing -= 1
        self._forget(claim)

    def _on_lost(self, record: ClaimRecord) -> None:
        """The lease keeper found ``record``'s lease gone: count it, stop its handler."""
        self.counts.lost += 1
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

    async def _drain(self) -> None:
        if self._chores:  # hand-backs in flight (a dependency went down): let them land
            await asyncio.wait(list(self._chores), timeout=self.options.grace_ms / 1000 + 1)
        # Prefetched jobs never started: hand them back untouched.
        while not self._ready.empty():
            claim = self._ready.get_nowait()
            await self._release(claim)
        running = self._tracker.running()
        if running:
            tasks = [r.task for r in running if r.task is not None]
            await asyncio.wait(tasks, timeout=self.options.grace_ms / 1000)
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
        return any(r.task is not None for r in self._tracker)

    async def _release(self, claim: Claim) -> None:
        await self._outcomes.release_once(claim)
        self._forget(claim)
