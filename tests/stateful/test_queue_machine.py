"""EchoMQ's real Lua transitions on the real Valkey, checked step by step against a model.

A Hypothesis ``RuleBasedStateMachine`` drives every transition (plain and lane enqueue, claim,
lane claim, complete, fail, extend, release, reap, promote, retry_dead, worker heartbeats)
with real and stale fencing tokens, on the session's real ``valkey-server`` (no mocks). A
small pure-Python model predicts each reply, and after every step the whole queue is read
back and compared with it: every job in exactly one location and the right one, attempts
never decreasing, the lanes' fair order (``new`` and the ring holding exactly the non-empty
lanes, each once, in the order of the model in ``tests/echomq/fair_order.py``),
lane loads, counters, no job vanishing, and every stale call changing nothing.

The passage of time is simulated honestly: leases are judged by their score in ``active``
(a deadline on the server clock), due times by their score in ``scheduled`` and worker
liveness by their score in ``workers``. Moving one of those scores to 0 with ``ZADD XX`` is
exactly what the server would see once its clock passed the deadline, so the machine never
sleeps and never races a clock. Every lease it mints is long (10 min) and every far-away
delay is an hour, so nothing lapses by itself during a run.

``CODEMOJEX_HYPOTHESIS_EXAMPLES`` raises the number of examples (default 60).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import echomq
import echomq.ids
import echomq.types
from echomq.checks import DEFAULT_MAX_ATTEMPTS
from echomq.codec import text
from echomq.errors import DeadlinePassed, InvalidState, JobNotFound, LaneFull
from echomq.settings import Settings
from tests.echomq.conftest import locations, snapshot
from tests.echomq.fair_order import FairOrder

EXAMPLES = int(os.environ.get("CODEMOJEX_HYPOTHESIS_EXAMPLES", "60"))
STEPS = 40

LANES = ("a", "b", "ü")  # a non-ASCII lane exercises the byte round trip of lane names
SCOPES = (None, "s", "t")
WORKERS = ("w1", "w2")
OPS = ("complete", "fail", "extend", "release")
LEASE_MS = 600_000  # never runs out by itself during a run; expiry is forced (expire_lease)
FAR_MS = 3_600_000  # a delay or retry that is not due during a run unless forced (make_due)
LAPSE_MS = 600_000
FAR_DEADLINE_MS = 4_000_000_000_000  # year 2096: an admission deadline not yet passed
MAX_JOBS = 60  # below promote_limit and the reap limit (100), so one call moves them all

# Retain every completed row: "no job vanishes" must hold for the whole run.
SETTINGS = Settings(keep_completed=1_000_000, keep_completed_ms=10**12)

# Any id the model never minted; stale calls on it must also change nothing.
GHOST = "JOB_00000000000000000000000000"


@dataclass
class MJob:
    """The model's view of one job."""

    id: str
    lane: str | None
    payload: Any
    max_attempts: int
    state: str = "pending"  # pending | active | scheduled | completed | dead | cancelled
    attempts: int = 0
    failures: int = 0
    stalls: int = 0
    seq: int | None = None
    worker: str | None = None
    expired: bool = False  # active: lease score moved into the past
    due: int | None = None  # scheduled: its score once due; None = not due during the run
    result: Any = None
    error: str | None = None
    reason: str | None = None
    priority: int = 0  # higher claimed first, id order among equals

    def location(self) -> str:
        if self.state == "pending":
            return f"lane:{self.lane}" if self.lane else "pending"
        return self.state


def _pick(ids: list[str], i: int) -> str:
    return ids[i % len(ids)]


def _ignoring_refused(q: echomq.Queue, snap: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snap.items() if k != q.keys.refused}


class QueueMachine(RuleBasedStateMachine):
    url: str = ""  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.conn = redis.asyncio.Redis.from_url(self.url, decode_responses=False)
        self.q = echomq.Queue(self.conn, f"sm{uuid.uuid4().hex[:12]}", SETTINGS)
        # The model.
        self.jobs: dict[str, MJob] = {}
        self.plain: set[str] = set()
        self.lane_q: dict[str, set[str]] = {lane: set() for lane in LANES}
        self.order = FairOrder()  # which lane the next lane claim serves
        self.counters: Counter[str] = Counter()
        self.seqs: Counter[tuple[str, str]] = Counter()
        self.events: list[tuple[str, str]] = []  # (type, job_id), in append order
        self.registered: set[str] = set()
        self.lapsed: set[str] = set()
        self.paused = False  # q.pause(): claims hand out nothing until q.resume()
        # Bookkeeping for the checks.
        self.seen_attempts: dict[str, int] = {}
        self.touched: set[str] = set()
        self.last_id = ""

    def teardown(self) -> None:
        try:
            self.run(self._drop_keys())
        finally:
            try:
                self.run(self.conn.aclose())
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    async def _drop_keys(self) -> None:
        keys = [k async for k in self.conn.scan_iter(match=f"{self.q.keys.prefix}*")]
        if keys:
            await self.conn.unlink(*keys)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    # -- model helpers ---------------------------------------------------------------

    def ids_in(self, *states: str) -> list[str]:
        return sorted(j.id for j in self.jobs.values() if j.state in states)

    def ordered(self, ids: set[str]) -> list[str]:
        """Claim order of waiting jobs: a set scored -priority pops highest first, then by id."""
        return sorted(ids, key=lambda jid: (-self.jobs[jid].priority, jid))

    def load(self, lane: str) -> int:
        return sum(
            1
            for j in self.jobs.values()
            if j.lane == lane and j.state in ("pending", "active", "scheduled")
        )

    def place(self, j: MJob) -> None:
        j.state, j.worker, j.expired, j.due = "pending", None, False, None
        if j.lane:
            waiting = self.lane_q[j.lane]
            waiting.add(j.id)
            if len(waiting) == 1:
                self.order.activate(j.lane)
        else:
            self.plain.add(j.id)

    def promote_model(self) -> list[str]:
        """Due scheduled jobs go back in ZRANGEBYSCORE order: (score, id)."""
        due = sorted(
            (j.due, j.id)
            for j in self.jobs.values()
            if j.state == "scheduled" and j.due is not None
        )
        for _, jid in due:
            self.place(self.jobs[jid])
            self.touched.add(jid)
        if due:
            self.counters["promoted"] += len(due)
        return [jid for _, jid in due]

    def lease(self, jid: str, worker: str) -> MJob:
        # A claim proves its worker alive: a registered worker's heartbeat deadline moves
        # to now + its lapse (lease_all), so it is no longer lapsed.
        self.lapsed.discard(worker)
        j = self.jobs[jid]
        j.attempts += 1
        j.state, j.worker, j.expired = "active", worker, False
        self.touched.add(jid)
        return j

    def to_dead(self, j: MJob, reason: str) -> None:
        j.state, j.worker, j.expired, j.reason = "dead", None, False, reason
        self.counters["dead"] += 1
        self.events.append(("dead", j.id))

    def stall(self, j: MJob) -> None:
        j.stalls += 1
        self.counters["reaped"] += 1
        self.events.append(("reaped", j.id))
        self.touched.add(j.id)
        if j.failures + j.stalls >= j.max_attempts:
            self.to_dead(j, "lease expired too often")
        else:
            self.place(j)

    def new_job(self, jid: str, lane: str | None, payload: Any, max_attempts: int) -> MJob:
        assert echomq.ids.is_branded(jid, "JOB")
        assert jid not in self.jobs
        assert jid > self.last_id, "ids must sort by mint time"
        self.last_id = jid
        j = MJob(jid, lane, payload, max_attempts)
        self.jobs[jid] = j
        self.counters["enqueued"] += 1
        self.touched.add(jid)
        return j

    def check_claims(self, batch: echomq.types.ClaimBatch, expected: list[str]) -> None:
        assert [c.job_id for c in batch.claims] == expected
        for c in batch.claims:
            j = self.jobs[c.job_id]
            assert c.token == j.attempts
            assert c.lane == j.lane
            assert c.payload == j.payload
            assert c.seq == j.seq
            assert c.lease_until_ms == batch.server_now_ms + LEASE_MS
        if expected:
            self.counters["claimed"] += len(expected)
        has_scheduled = any(j.state == "scheduled" for j in self.jobs.values())
        assert (batch.next_due_ms is not None) == has_scheduled

    async def unchanged(self, call: Any, *, allow_refused: bool) -> tuple[Any, Exception | None]:
        """Run ``call()``; assert the queue's keys are exactly as before (the refusal tally
        aside when ``allow_refused``). Returns the reply or the exception raised."""
        before = await snapshot(self.q)
        reply: Any = None
        error: Exception | None = None
        try:
            reply = await call()
        except echomq.EchoMQError as exc:
            error = exc
        after = await snapshot(self.q)
        if allow_refused:
            before, after = _ignoring_refused(self.q, before), _ignoring_refused(self.q, after)
        assert after == before
        return reply, error

    # -- enqueue -----------------------------------------------------------------------

    @initialize(
        seed=st.lists(
            st.tuples(st.sampled_from((None, *LANES)), st.integers(1, 3), st.booleans()),
            max_size=8,
        )
    )
    def seed_jobs(self, seed: list[tuple[str | None, int, bool]]) -> None:
        """Start most runs with a few jobs, so the steps reach retries, stalls and deaths."""
        for n, (lane, max_attempts, delayed) in enumerate(seed):
            if lane is None:
                self.enqueue_plain(n % 10, max_attempts, delayed)
            else:
                self.enqueue_lane(lane, n % 10, max_attempts, 0, None, 0)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(payload=st.integers(0, 9), max_attempts=st.integers(1, 3), delayed=st.booleans())
    def enqueue_plain(self, payload: int, max_attempts: int, delayed: bool) -> None:
        jid = self.run(
            self.q.jobs.enqueue(
                {"p": payload}, max_attempts=max_attempts, delay_ms=FAR_MS if delayed else 0
            )
        )
        j = self.new_job(jid, None, {"p": payload}, max_attempts)
        if delayed:
            j.state = "scheduled"
        else:
            self.place(j)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        lane=st.sampled_from(LANES),
        payload=st.integers(0, 9),
        max_attempts=st.integers(1, 3),
        max_pending=st.sampled_from([0, 0, 1, 2, 3]),
        scope=st.sampled_from(SCOPES),
        deadline=st.sampled_from([0, 0, 0, 1, FAR_DEADLINE_MS]),
    )
    def enqueue_lane(
        self,
        lane: str,
        payload: int,
        max_attempts: int,
        max_pending: int,
        scope: str | None,
        deadline: int,
    ) -> None:
        def call() -> Any:
            return self.q.lanes.submit(
                lane,
                {"p": payload},
                max_attempts=max_attempts,
                max_pending=max_pending,
                deadline_ms=deadline,
                seq_scope=scope,
            )

        if deadline == 1 or (max_pending and self.load(lane) >= max_pending):
            # A refused admission changes nothing at all, not even a tally.
            _, error = self.run(self.unchanged(call, allow_refused=False))
            if deadline == 1:
                assert isinstance(error, DeadlinePassed)
            else:
                assert isinstance(error, LaneFull) and error.limit == max_pending
            return
        receipt = self.run(call())
        assert receipt.created
        j = self.new_job(receipt.job_id, lane, {"p": payload}, max_attempts)
        if scope is not None:
            j.seq = self.seqs[lane, scope]
            self.seqs[lane, scope] += 1
        assert receipt.seq == j.seq
        self.place(j)

    @precondition(lambda self: self.jobs)
    @rule(i=st.integers(0, 99), lane=st.sampled_from(LANES), as_lane=st.booleans())
    def enqueue_existing_id(self, i: int, lane: str, as_lane: bool) -> None:
        """Enqueueing an id that exists is a no-op returning that id, whatever its state."""
        j = self.jobs[_pick(sorted(self.jobs), i)]

        async def call() -> Any:
            if as_lane:
                return await self.q.lanes.submit(
                    lane, {"other": 1}, job_id=j.id, max_pending=1, seq_scope="s"
                )
            return await self.q.jobs.enqueue({"other": 1}, job_id=j.id, delay_ms=5)

        reply, error = self.run(self.unchanged(call, allow_refused=False))
        assert error is None
        if as_lane:
            assert reply == echomq.Enqueued(j.id, j.seq, False)
        else:
            assert reply == j.id
        self.touched.add(j.id)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        lane=st.sampled_from((None, *LANES)),
        priority=st.sampled_from([0, 1, -1, 7, 1000, -1000]),
        when=st.sampled_from(["now", "delay", "run_at_far", "run_at_past"]),
    )
    def enqueue_timed(self, lane: str | None, priority: int, when: str) -> None:
        """A job with a priority, due now, after a delay or at a time on the server clock
        (one already past is now): a delayed lane job waits in ``scheduled``."""
        now = self.run(self.q.server_time_ms())
        timing: dict[str, Any] = {
            "now": {},
            "delay": {"delay_ms": FAR_MS},
            "run_at_far": {"run_at_ms": now + FAR_MS},
            "run_at_past": {"run_at_ms": now - 1},
        }[when]
        if lane is None:
            jid = self.run(self.q.jobs.enqueue({"t": 1}, priority=priority, **timing))
        else:
            jid = self.run(self.q.lanes.enqueue(lane, {"t": 1}, priority=priority, **timing))
        j = self.new_job(jid, lane, {"t": 1}, DEFAULT_MAX_ATTEMPTS)
        j.priority = priority
        if when in ("delay", "run_at_far"):
            j.state = "scheduled"
        else:
            self.place(j)

    @rule()
    def pause(self) -> None:
        assert self.run(self.q.pause()) is not self.paused
        if not self.paused:
            self.counters["pauses"] += 1
        self.paused = True

    @rule()
    def resume(self) -> None:
        assert self.run(self.q.resume()) is self.paused
        if self.paused:
            self.counters["resumes"] += 1
        self.paused = False

    # -- claim -------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), count=st.integers(1, 3))
    def claim_plain(self, worker: str, count: int) -> None:
        batch = self.run(self.q.jobs.claim_many(worker, LEASE_MS, count))
        if self.paused:  # nothing handed out, nothing promoted, no due time to wake for
            assert batch.claims == [] and batch.next_due_ms is None
            return
        self.promote_model()
        expected = self.ordered(self.plain)[:count]
        for jid in expected:
            self.plain.remove(jid)
            self.lease(jid, worker)
        self.check_claims(batch, expected)

    @rule(worker=st.sampled_from(WORKERS), count=st.integers(1, 3))
    def claim_lanes(self, worker: str, count: int) -> None:
        batch = self.run(self.q.lanes.claim_many(worker, LEASE_MS, count))
        if self.paused:
            assert batch.claims == [] and batch.next_due_ms is None
            return
        self.promote_model()
        expected = []
        while len(expected) < count and (lane := self.order.take()) is not None:
            waiting = self.lane_q[lane]
            jid = self.ordered(waiting)[0]
            waiting.remove(jid)
            self.order.served(lane, bool(waiting))
            expected.append(jid)
            self.lease(jid, worker)
        self.check_claims(batch, expected)

    # -- fenced calls with the real token ------------------------------------------------

    @precondition(lambda self: self.ids_in("active"))
    @rule(i=st.integers(0, 99))
    def complete_held(self, i: int) -> None:
        j = self.jobs[_pick(self.ids_in("active"), i)]
        result = {"done": j.id[-6:], "attempt": j.attempts}
        assert self.run(self.q.jobs.complete(j.id, j.attempts, result)) is True
        j.state, j.worker, j.expired, j.result = "completed", None, False, result
        self.counters["completed"] += 1
        self.events.append(("completed", j.id))
        self.touched.add(j.id)
        info = self.run(self.q.jobs.get(j.id))
        assert info is not None and info.result == result and info.state == "completed"

    @precondition(lambda self: self.ids_in("active"))
    @rule(i=st.integers(0, 99), retry_now=st.booleans())
    def fail_held(self, i: int, retry_now: bool) -> None:
        j = self.jobs[_pick(self.ids_in("active"), i)]
        error = f"boom {j.attempts}"
        outcome = self.run(
            self.q.jobs.fail(j.id, j.attempts, error, retry_in_ms=0 if retry_now else FAR_MS)
        )
        j.failures += 1
        j.error = error
        j.worker, j.expired = None, False
        self.counters["failed"] += 1
        self.events.append(("failed", j.id))
        self.touched.add(j.id)
        if j.failures + j.stalls >= j.max_attempts:
            assert outcome == "dead"
            self.to_dead(j, f"failed {j.failures} times")
            return
        assert outcome == "scheduled"
        j.state = "scheduled"
        score = self.run(self.conn.zscore(self.q.keys.scheduled, j.id))
        now = self.run(self.q.server_time_ms())
        if retry_now:
            assert score is not None and score <= now
            j.due = int(score)
        else:
            assert score is not None and score > now + FAR_MS - 60_000

    @precondition(lambda self: self.ids_in("active"))
    @rule(i=st.integers(0, 99))
    def extend_held(self, i: int) -> None:
        j = self.jobs[_pick(self.ids_in("active"), i)]
        before = self.run(self.q.server_time_ms())
        assert self.run(self.q.jobs.extend(j.id, j.attempts, LEASE_MS)) is True
        score = self.run(self.conn.zscore(self.q.keys.active, j.id))
        assert score is not None and score >= before + LEASE_MS
        j.expired = False
        self.touched.add(j.id)

    @precondition(lambda self: self.ids_in("active"))
    @rule(i=st.integers(0, 99))
    def release_held(self, i: int) -> None:
        j = self.jobs[_pick(self.ids_in("active"), i)]
        assert self.run(self.q.jobs.release(j.id, j.attempts)) is True
        # attempts counts deliveries: a release leaves it (the holder is fenced off by
        # state, the job being pending) and the next claim makes it token + 1
        self.counters["released"] += 1
        self.touched.add(j.id)
        self.place(j)

    # -- stale calls --------------------------------------------------------------------

    @precondition(lambda self: self.ids_in("active"))
    @rule(op=st.sampled_from(OPS), i=st.integers(0, 99), delta=st.sampled_from([-1, 1]))
    def stale_token_on_held_job(self, op: str, i: int, delta: int) -> None:
        """An active job, but not the current token (an earlier holder's, or one never
        issued): changes nothing."""
        j = self.jobs[_pick(self.ids_in("active"), i)]
        self.stale(op, j.id, j.attempts + delta)
        self.touched.add(j.id)

    @rule(op=st.sampled_from(OPS), i=st.integers(0, 99), delta=st.sampled_from([0, 0, -1, 1]))
    def call_on_job_not_held(self, op: str, i: int, delta: int) -> None:
        """A job that is not active (pending, scheduled, completed, dead), with its last
        token (delta 0: the holder lost it) or another: changes nothing. With no such job,
        the call names a job that never existed."""
        idle = self.ids_in("pending", "scheduled", "completed", "dead")
        if not idle:
            self.stale(op, GHOST, 1 + delta)
            return
        j = self.jobs[_pick(idle, i)]
        self.touched.add(j.id)
        if op == "complete" and j.state == "completed" and delta == 0:
            # Its own token on the job it completed: a repeat (a batch re-sent after a lost
            # reply) is True and changes nothing at all, not even the refusal tally.
            reply, error = self.run(
                self.unchanged(
                    lambda: self.q.jobs.complete(j.id, j.attempts, {"again": True}),
                    allow_refused=False,
                )
            )
            assert error is None and reply is True
            return
        self.stale(op, j.id, j.attempts + delta)

    def stale(self, op: str, jid: str, token: int) -> None:
        calls = {
            "complete": lambda: self.q.jobs.complete(jid, token, {"late": True}),
            "fail": lambda: self.q.jobs.fail(jid, token, "late", retry_in_ms=0),
            "extend": lambda: self.q.jobs.extend(jid, token, LEASE_MS),
            "release": lambda: self.q.jobs.release(jid, token),
        }
        reply, error = self.run(self.unchanged(calls[op], allow_refused=True))
        assert error is None
        assert reply == ("stale" if op == "fail" else False)

    # -- the passage of time, and the reaper -----------------------------------------------

    @precondition(lambda self: self.ids_in("active"))
    @rule(i=st.integers(0, 99))
    def expire_lease(self, i: int) -> None:
        """Stand-in for time passing: the lease deadline (its score in ``active``, on the
        server clock) is moved into the past, which is all the reaper judges by."""
        j = self.jobs[_pick(self.ids_in("active"), i)]
        self.run(self.conn.zadd(self.q.keys.active, {j.id: 0}, xx=True))
        j.expired = True
        self.touched.add(j.id)

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        self.run(self.q.heartbeat(worker, LAPSE_MS))
        self.registered.add(worker)
        self.lapsed.discard(worker)

    @rule(worker=st.sampled_from(WORKERS))
    def lapse_worker(self, worker: str) -> None:
        """Register the worker, then let its heartbeat deadline pass (score moved to 0)."""
        self.run(self.q.heartbeat(worker, LAPSE_MS))
        self.run(self.conn.zadd(self.q.keys.workers, {worker: 0}, xx=True))
        self.registered.add(worker)
        self.lapsed.add(worker)

    @rule(expire=st.lists(st.integers(0, 99), max_size=3))
    def reap(self, expire: list[int]) -> None:
        """Optionally expire a few leases first (see expire_lease), then run the reaper."""
        for i in expire:
            if self.ids_in("active"):
                self.expire_lease(i)
        moved = self.run(self.q.stalled.reap())
        self.promote_model()
        # Expired leases first, in (score, id) order: every forced score is 0.
        expired = sorted(j.id for j in self.jobs.values() if j.state == "active" and j.expired)
        for jid in expired:
            self.stall(self.jobs[jid])
        assert moved[: len(expired)] == expired
        # Then the jobs of lapsed workers; a worker's job set has no order, so the lanes
        # they activate join the tail of ``new`` in an order the model cannot know.
        new_before = list(self.order.new)
        by_lapse = {
            j.id for j in self.jobs.values() if j.state == "active" and j.worker in self.lapsed
        }
        for jid in sorted(by_lapse):
            self.stall(self.jobs[jid])
        assert len(moved) == len(expired) + len(by_lapse)
        assert set(moved[len(expired) :]) == by_lapse
        if self.lapsed:
            self.counters["lapsed_workers"] += len(self.lapsed)
        self.registered -= self.lapsed
        self.lapsed.clear()
        new = [text(x) for x in self.run(self.conn.lrange(self.q.keys.new, 0, -1))]
        assert new[: len(new_before)] == new_before
        assert sorted(new[len(new_before) :]) == sorted(self.order.new[len(new_before) :])
        self.order.new = new

    def not_due(self) -> list[str]:
        return sorted(j.id for j in self.jobs.values() if j.state == "scheduled" and j.due is None)

    @precondition(lambda self: self.not_due())
    @rule(i=st.integers(0, 99))
    def make_due(self, i: int) -> None:
        """Stand-in for time passing: a scheduled job's due time moves into the past."""
        j = self.jobs[_pick(self.not_due(), i)]
        self.run(self.conn.zadd(self.q.keys.scheduled, {j.id: 0}, xx=True))
        j.due = 0
        self.touched.add(j.id)

    @rule(make_due=st.lists(st.integers(0, 99), max_size=3))
    def promote(self, make_due: list[int]) -> None:
        """Optionally make a few scheduled jobs due first (see make_due), then promote."""
        for i in make_due:
            if self.not_due():
                self.make_due(i)
        n = self.run(self.q.promote())
        assert n == len(self.promote_model())

    # -- the operator ---------------------------------------------------------------------

    @precondition(lambda self: self.ids_in("dead"))
    @rule(i=st.integers(0, 99))
    def retry_dead(self, i: int) -> None:
        j = self.jobs[_pick(self.ids_in("dead"), i)]
        self.run(self.q.jobs.retry_dead(j.id))
        j.failures = j.stalls = 0
        j.reason = None
        self.counters["retried"] += 1
        self.touched.add(j.id)
        self.place(j)

    @rule(i=st.integers(0, 99))
    def retry_of_a_live_job_is_refused(self, i: int) -> None:
        """retry_dead of a job that is not dead (or does not exist) changes nothing."""
        live = self.ids_in("pending", "active", "scheduled", "completed")
        jid = _pick(live, i) if live else GHOST
        _, error = self.run(
            self.unchanged(lambda: self.q.jobs.retry_dead(jid), allow_refused=False)
        )
        assert isinstance(error, InvalidState if live else JobNotFound)

    # -- cancel ----------------------------------------------------------------------------

    @rule(i=st.integers(0, 99))
    def cancel(self, i: int) -> None:
        """Cancel any job (or one never minted): a waiting, scheduled or running one leaves
        its location for ``cancelled``, counted once, and a lane it empties leaves ``new``
        or the ring; a finished, dead or cancelled job changes nothing."""
        jid = _pick(sorted(self.jobs), i) if self.jobs else GHOST
        j = self.jobs.get(jid)
        if j is None or j.state not in ("pending", "active", "scheduled"):
            reply, error = self.run(
                self.unchanged(lambda: self.q.jobs.cancel(jid), allow_refused=False)
            )
            assert error is None and reply is False
            return
        assert self.run(self.q.jobs.cancel(jid)) is True
        if j.state == "pending" and j.lane:
            waiting = self.lane_q[j.lane]
            waiting.remove(jid)
            if not waiting:
                self.order.new = [x for x in self.order.new if x != j.lane]
                self.order.ring = [x for x in self.order.ring if x != j.lane]
        elif j.state == "pending":
            self.plain.remove(jid)
        j.state, j.worker, j.expired, j.due = "cancelled", None, False, None
        self.counters["cancelled"] += 1
        self.events.append(("cancelled", jid))
        self.touched.add(jid)

    @precondition(lambda self: self.ids_in("cancelled"))
    @rule(op=st.sampled_from(OPS), i=st.integers(0, 99), delta=st.sampled_from([0, 0, -1, 1]))
    def call_on_cancelled_job(self, op: str, i: int, delta: int) -> None:
        """A cancelled job's last holder (delta 0) or any other token is refused, and an
        operator's retry_dead too: nothing changes."""
        j = self.jobs[_pick(self.ids_in("cancelled"), i)]
        self.touched.add(j.id)
        self.stale(op, j.id, j.attempts + delta)
        _, error = self.run(
            self.unchanged(lambda: self.q.jobs.retry_dead(j.id), allow_refused=False)
        )
        assert isinstance(error, InvalidState)

    # -- the invariants, read back from the server after every step ---------------------

    @invariant()
    def server_matches_model(self) -> None:
        self.run(self.check())
        self.touched.clear()

    async def check(self) -> None:
        q, k = self.q, self.q.keys
        pipe = self.conn.pipeline(transaction=False)
        pipe.time()
        pipe.zrange(k.pending, 0, -1)
        pipe.zrange(k.active, 0, -1, withscores=True)
        pipe.zrange(k.scheduled, 0, -1, withscores=True)
        pipe.zrange(k.completed, 0, -1)
        pipe.zrange(k.dead, 0, -1)
        pipe.lrange(k.ring, 0, -1)
        pipe.time()  # (was the load hash; loads are read per lane below)
        pipe.xrange(k.events)
        pipe.llen(k.wake)
        pipe.zrange(k.workers, 0, -1, withscores=True)
        for lane in LANES:
            pipe.zrange(k.lane(lane), 0, -1)
        ids = sorted(self.jobs)
        fields = ("state", "attempts", "failures", "stalls", "lane", "reason", "error")
        for jid in ids:
            pipe.hmget(k.job(jid), *fields)
        r = await pipe.execute()
        secs, micros = r[0]
        now = int(secs) * 1000 + int(micros) // 1000
        pending = [text(x) for x in r[1]]
        active = {text(m): s for m, s in r[2]}
        scheduled = {text(m): s for m, s in r[3]}
        completed, dead = [text(x) for x in r[4]], [text(x) for x in r[5]]
        ring = [text(x) for x in r[6]]
        events = [(text(f[b"type"]), text(f[b"job_id"])) for _, f in r[8]]
        wake = r[9]
        workers = {text(m): s for m, s in r[10]}
        lanes = {lane: [text(x) for x in r[11 + n]] for n, lane in enumerate(LANES)}
        rows = dict(zip(ids, r[11 + len(LANES) :], strict=True))
        new = [text(x) for x in await self.conn.lrange(k.new, 0, -1)]
        owed = await self.conn.get(k.owed) == b"1"
        cancelled = [text(x) for x in await self.conn.zrange(k.cancelled, 0, -1)]

        # Every id in every location, and every job located exactly once, where the model
        # says (a score-0 set pops in id order, which the model mirrors with sorted()).
        where: dict[str, list[str]] = {}
        for name, members in (
            ("pending", pending),
            ("active", list(active)),
            ("scheduled", list(scheduled)),
            ("completed", completed),
            ("dead", dead),
            ("cancelled", cancelled),
            *((f"lane:{lane}", members) for lane, members in lanes.items()),
        ):
            for jid in members:
                where.setdefault(jid, []).append(name)
        assert set(where) == set(self.jobs), "a job vanished, or an unknown id appeared"
        for jid, j in self.jobs.items():
            assert where[jid] == [j.location()], (jid, where[jid], j)
        assert pending == self.ordered(self.plain)
        for lane in LANES:
            assert lanes[lane] == self.ordered(self.lane_q[lane])

        # The fair order: ``new`` and the ring hold exactly the non-empty lanes, each in one
        # of them, once, in the model's order, and the ring's turn flag agrees.
        assert (new, ring, owed) == (self.order.new, self.order.ring, self.order.owed)
        assert len(set(new + ring)) == len(new + ring)
        assert set(new + ring) == {lane for lane in LANES if self.lane_q[lane]}

        # Rows: state, fencing token, delivery tally, poison rule.
        for jid, j in self.jobs.items():
            state, attempts, failures, stalls, lane, reason, error = (
                text(x) if x is not None else None for x in rows[jid]
            )
            # a pending row has no state field: pending is a row without one
            assert (state or "pending") == j.state
            assert state != "pending", "a pending row keeps no state field"
            assert int(attempts or 0) == j.attempts
            assert j.attempts >= self.seen_attempts.get(jid, 0), "attempts decreased"
            self.seen_attempts[jid] = j.attempts
            assert int(failures or 0) == j.failures and int(stalls or 0) == j.stalls
            assert j.failures + j.stalls <= j.max_attempts
            if j.failures + j.stalls == j.max_attempts:
                assert j.state == "dead"
            assert (lane or None) == j.lane
            if j.state == "dead":
                assert reason == j.reason
            assert (error or None) == j.error
            if j.state == "active":
                assert (active[jid] == 0) if j.expired else (active[jid] > now)
            if j.state == "scheduled":
                assert scheduled[jid] == j.due if j.due is not None else scheduled[jid] > now

        # Lane loads: unfinished jobs per lane, as the index and as the API report them.
        for lane in LANES:
            assert await q.lanes.load(lane) == self.load(lane)
            listed = {i.job_id for i in await q.lanes.unfinished(lane)}
            assert listed == {
                jid
                for jid, j in self.jobs.items()
                if j.lane == lane and j.state in ("pending", "active", "scheduled")
            }

        # Counters and the one-stop stats snapshot.
        stats = await q.stats()
        assert stats["counters"] == {name: n for name, n in self.counters.items() if n}
        states = Counter(j.state for j in self.jobs.values())
        assert stats["pending"] == states["pending"]
        for name in ("active", "scheduled", "completed", "dead"):
            assert stats[name] == states[name]
        assert stats["lanes"] == {lane: len(self.lane_q[lane]) for lane in new + ring}
        assert stats["lane_count"] == sum(1 for lane in LANES if self.lane_q[lane])
        assert stats["paused"] == self.paused
        # One event per counted completion, failure, reap and death, each job's in the order
        # they happened (failed then dead, reaped then dead); stale calls append none. Across
        # jobs the order is the model's too, except among a lapsed worker's jobs.
        assert Counter(events) == Counter(self.events)
        for jid in self.jobs:
            assert [e for e in events if e[1] == jid] == [e for e in self.events if e[1] == jid]
        assert wake <= 1

        # The worker registry: a lapsed worker stays listed (score in the past) until reaped.
        assert set(workers) == self.registered
        for worker, deadline in workers.items():
            assert (deadline == 0) if worker in self.lapsed else (deadline > now)

        # The suite's own probe agrees for the jobs this step touched.
        for jid in sorted(self.touched & set(self.jobs)):
            assert await locations(q, jid) == [self.jobs[jid].location()]


@pytest.mark.slow
@pytest.mark.timeout(max(120, EXAMPLES * 2))
def test_queue_matches_model(valkey_url: str) -> None:
    QueueMachine.url = valkey_url
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
