"""The Consumer's limits (issue 21): a dependency down (``echomq.Unavailable``), a time
limit on handlers (``timeout_ms``), a suspect that hangs, and a claim reply too large to
read within the socket timeout. Real Valkey throughout; the "dependency" is a flag the
handler reads, the way a database's answer would be."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio

import echomq
from echomq.consumer.park import blocking_twin
from echomq.server import EmbeddedValkey
from tests.echomq.test_consumer import Runner, completed, start_consumer, wait_for

_ = start_consumer  # the fixture, shared with test_consumer


async def _row(q: echomq.Queue, worker_id: str) -> dict[str, str]:
    for w in await q.workers():
        if w.worker_id == worker_id:
            return {str(k): str(v) for k, v in w.meta.items()}
    return {}


# -- a dependency down ----------------------------------------------------------------------


async def test_a_dependency_down_spends_nothing_and_the_consumer_waits(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    """The handler's database is down for 3 s: every job it meets is handed back (no
    failure, no delivery spent), the consumer stops claiming (one probe job at a time,
    backoff up to 1 s), the worker row says "waiting", and the first probe after the
    database is back resumes it within a second."""
    down = True
    calls = Counter[str]()
    done_at: list[float] = []

    async def handler(claim: echomq.Claim) -> str:
        calls[claim.job_id] += 1
        await asyncio.sleep(0.01)
        if down:
            raise echomq.Unavailable("database unreachable")
        done_at.append(time.monotonic())
        return "ok"

    ids = [await q.lanes.enqueue(f"l{i % 5}", i, max_attempts=2) for i in range(40)]
    c = await start_consumer(handler, concurrency=4, worker_id="WRK_waits")
    await wait_for(lambda: _true(c.waiting))
    first_wave = sum(calls.values())
    await wait_for(lambda: _state_is(q, "WRK_waits", "waiting"), 5)
    await asyncio.sleep(3)
    probes = sum(calls.values()) - first_wave
    down = False
    back = time.monotonic()
    await wait_for(lambda: completed(q, 40), 20)
    resume_s = done_at[0] - back
    stats = await q.stats()
    print(
        f"\n[limits] dependency down 3 s: {first_wave} handed back at once, {probes} probes"
        f" while down, resumed {resume_s * 1000:.0f} ms after it came back,"
        f" failed={stats['counters'].get('failed', 0)} dead={stats['dead']}"
    )
    assert stats["counters"].get("failed", 0) == 0 and stats["dead"] == 0
    assert first_wave <= 4  # the first wave: the slots' jobs, nothing claimed after
    assert 2 <= probes <= 12  # backoff 0.1, 0.2, 0.4, 0.8, 1, 1 ... s: never a flood
    assert resume_s < 1.3  # probe_max_ms (1 s) + the probe itself
    assert not c.waiting and c.counts.unavailable >= first_wave and c.counts.failed == 0
    for jid in ids:
        info = await q.jobs.get(jid)
        assert info is not None and info.state == "completed" and info.failures == 0, info
    await wait_for(lambda: _state_is(q, "WRK_waits", "idle", "busy"), 5)


class Dependency:
    """A dependency down until told otherwise, counting the probes that ask it."""

    def __init__(self) -> None:
        self.down = True
        self.asked = 0

    async def probe(self) -> None:
        self.asked += 1
        if self.down:
            raise ConnectionError("still down")


async def test_a_probe_callable_is_asked_instead_of_a_job(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    dependency = Dependency()
    calls = Counter[str]()

    async def handler(claim: echomq.Claim) -> str:
        calls[claim.job_id] += 1
        if dependency.down:
            raise echomq.Unavailable("service down")
        return "ok"

    for i in range(10):
        await q.lanes.enqueue(f"l{i}", i)
    c = await start_consumer(handler, concurrency=2, probe=dependency.probe, probe_max_ms=300)
    await wait_for(lambda: _true(c.waiting))
    before = sum(calls.values())
    await asyncio.sleep(1.5)
    assert sum(calls.values()) == before  # no job goes through while the probe says down
    assert 3 <= dependency.asked <= 12
    dependency.down = False
    t = time.monotonic()
    await wait_for(lambda: completed(q, 10), 10)
    assert time.monotonic() - t < 1.0
    assert (await q.stats())["counters"].get("failed", 0) == 0


async def test_a_consumer_parked_when_its_dependency_goes_down_starts_probing_at_once(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    """The one job in the queue meets the dependency down while the claimer is parked on
    the wake key (it asked for 4 and got 1), and the token its hand-back leaves goes to
    another parked client (here the test's own BLPOP, parked before the claimer parked
    again), as it goes to another worker. The wait itself must wake the claimer: the probe
    is asked within its backoff, not after the park's 15 s. (Under `codemojex up` with
    SQLite locked, a worker parked so said `waiting` 10 s after the lock was released,
    without one probe meanwhile.)"""
    dependency = Dependency()

    async def handler(claim: echomq.Claim) -> str:
        await asyncio.sleep(0.3)  # the claimer parks again, behind the test's BLPOP
        if dependency.down:
            raise echomq.Unavailable("service down")
        return "ok"

    c = await start_consumer(handler, concurrency=4, probe=dependency.probe, probe_max_ms=300)
    await asyncio.sleep(0.3)  # parked on the empty queue
    other = await blocking_twin(q.conn, q.keys.wake)
    try:
        token = asyncio.create_task(other.blpop([q.keys.wake], timeout=10))
        await asyncio.sleep(0.2)  # the test's BLPOP is queued behind the claimer's
        await q.lanes.enqueue("only", 1)  # wakes the claimer, which claims it and parks
        await wait_for(lambda: _true(c.waiting))
        assert await asyncio.wait_for(token, 5) is not None  # the hand-back's token: ours
        # the park is 15 s: the wait woke it
        await wait_for(lambda: _true(dependency.asked >= 1), 3)
        dependency.down = False
        await wait_for(lambda: completed(q, 1), 3)
    finally:
        await other.aclose()
    assert not c.waiting and (await q.stats())["counters"].get("failed", 0) == 0


async def test_prefetched_jobs_go_back_when_a_dependency_goes_down(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    gate = asyncio.Event()
    down = True

    async def handler(claim: echomq.Claim) -> str:
        await gate.wait()
        if down:
            raise echomq.Unavailable("down")
        return "ok"

    for i in range(12):
        await q.lanes.enqueue(f"l{i}", i)
    c = await start_consumer(handler, concurrency=2, prefetch=4, worker_id="WRK_pf_down")
    await wait_for(lambda: _true(len(c.in_flight) == 6))
    gate.set()
    await wait_for(lambda: _true(c.waiting))
    # The two running jobs and the four prefetched ones are all back on their lanes.
    await wait_for(lambda: _true(len(c.in_flight) <= 1), 5)
    assert (await q.stats())["active"] <= 1
    down = False
    await wait_for(lambda: completed(q, 12), 10)
    assert (await q.stats())["counters"].get("failed", 0) == 0


async def test_a_hung_handler_from_before_the_wait_does_not_hold_the_probe_back(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    down = True

    async def handler(claim: echomq.Claim) -> str:
        if claim.payload == "hang":
            await asyncio.Event().wait()  # never returns, and no time limit is set
        await asyncio.sleep(0.05)
        if down:
            raise echomq.Unavailable("down")
        return "ok"

    await q.lanes.enqueue("h", "hang")
    for i in range(6):
        await q.lanes.enqueue(f"o{i}", i)
    c = await start_consumer(handler, concurrency=3, lease_ms=1_000)
    await wait_for(lambda: _true(c.waiting))
    await asyncio.sleep(1.0)
    down = False
    await wait_for(lambda: completed(q, 6), 5)  # probes went on beside the hung handler
    assert (await q.stats())["counters"].get("failed", 0) == 0


async def test_a_waiting_consumer_resumes_though_another_keeps_the_queue_empty(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    """A's dependency comes back while B (healthy) drains everything, and new jobs then
    arrive one at a time. Each arrival wakes one parked consumer; when it is A, A's probe
    must claim that job before the next arrival wakes B, whose claim would take it too.
    (A probe that first paused, as after a probe that ran, lost that race to every
    arrival: A said "waiting" for as long as the trickle lasted. The PostgreSQL-restart
    chaos test caught it in 2 of 12 runs under disk load.)"""
    down = True
    ran_on: Counter[str] = Counter()

    def handler_of(name: str, needs_dependency: bool) -> echomq.Handler:
        async def handler(claim: echomq.Claim) -> str:
            if needs_dependency and down:
                raise echomq.Unavailable("down")
            ran_on[name] += 1
            return "ok"

        return handler

    await q.lanes.enqueue("first", 0)
    a = await start_consumer(
        handler_of("a", True), concurrency=4, probe_max_ms=2_000, worker_id="WRK_probe_a"
    )
    await wait_for(lambda: _true(a.waiting))
    await asyncio.sleep(2.5)  # a few probes: A's pause between them is now 1-2 s
    b = await start_consumer(handler_of("b", False), concurrency=4, worker_id="WRK_probe_b")
    await wait_for(lambda: completed(q, 1), 5)  # B took the job A was probing with
    down = False
    for i in range(30):  # 6.6 s: several of A's longest pauses
        await q.lanes.enqueue(f"t{i}", i)
        await asyncio.sleep(0.22)
        if not a.waiting:
            break
    print(f"\n[limits] after the trickle: ran on A {ran_on['a']}, on B {ran_on['b']}")
    assert not a.waiting, "A still waiting: its probes never met a job"
    assert ran_on["a"] >= 1 and not b.waiting


# -- a time limit -------------------------------------------------------------------------


async def test_a_handler_past_its_time_limit_is_cancelled_and_its_job_failed(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    cancelled = 0

    async def handler(claim: echomq.Claim) -> str:
        nonlocal cancelled
        if claim.payload == "hang":
            try:
                await asyncio.Event().wait()  # never returns
            except asyncio.CancelledError:
                cancelled += 1
                raise
        return "ok"

    hang = await q.lanes.enqueue("h", "hang", max_attempts=2)
    others = [await q.lanes.enqueue(f"o{i}", i) for i in range(5)]
    c = await start_consumer(handler, concurrency=1, timeout_ms=300, lease_ms=1_000)
    await wait_for(lambda: completed(q, 5), 10)

    async def dead() -> bool:
        info = await q.jobs.get(hang)
        return info is not None and info.state == "dead"

    await wait_for(dead, 10)
    info = await q.jobs.get(hang)
    assert info is not None and info.error == "timed out" and info.failures == 2, info
    assert cancelled == 2 and c.counts.timed_out == 2 and c.counts.failed == 2
    for jid in others:
        got = await q.jobs.get(jid)
        assert got is not None and got.state == "completed"


async def test_a_handler_that_ignores_cancellation_holds_neither_job_nor_slot(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    stop = asyncio.Event()

    async def handler(claim: echomq.Claim) -> str:
        if claim.payload == "stubborn":
            while not stop.is_set():
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    continue  # swallowed: this handler will not stop
        return "ok"

    stubborn = await q.lanes.enqueue("s", "stubborn", max_attempts=1)
    await q.lanes.enqueue("o", "fine")
    c = await start_consumer(handler, concurrency=1, timeout_ms=200, lease_ms=1_000)
    try:
        await wait_for(lambda: completed(q, 1), 10)  # the other job still gets the slot
        info = await q.jobs.get(stubborn)
        assert info is not None and info.state == "dead" and info.error == "timed out"
        assert c.counts.timed_out == 1
    finally:
        stop.set()


async def test_a_hung_suspect_does_not_stop_the_consumer_claiming(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    """A job whose holder died runs alone, but a suspect that never returns holds the
    consumer back for at most min(lease, timeout) after it started, not forever."""
    suspect = await q.lanes.enqueue("s", "hang")
    assert len((await q.lanes.claim_many("w-dying", 100, 1)).claims) == 1
    await asyncio.sleep(0.15)
    assert await q.stalled.reap() == [suspect]
    started = asyncio.Event()

    async def handler(claim: echomq.Claim) -> str:
        if claim.payload == "hang":
            started.set()
            await asyncio.Event().wait()
        return "ok"

    c = await start_consumer(handler, concurrency=4, lease_ms=1_000, worker_id="WRK_susp")
    await asyncio.wait_for(started.wait(), 5)
    t = time.monotonic()
    for i in range(6):
        await q.lanes.enqueue(f"o{i}", i)
    await wait_for(lambda: completed(q, 6), 8)
    waited = time.monotonic() - t
    assert waited < 3.0, waited  # suspect_ms = lease = 1 s
    assert c.options.suspect_ms == 1_000


# -- a claim reply too large ----------------------------------------------------------------


@pytest.fixture
async def private(tmp_path: Path) -> AsyncIterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path / "valkey", appendfsync="everysec")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_claim_too_large_to_read_in_time_halves_the_batch(
    private: EmbeddedValkey,
) -> None:
    """24 jobs of 8 MB on 3 lanes, a client whose socket timeout is 250 ms: a claim of all
    (192 MB; one job ~40 ms) cannot be read in time. (With 4 MB jobs a quiet machine once
    read all 96 MB within the 250 ms, and the batch never had to halve.) The same claim again would time out again, on the same
    jobs, for ever; halving the batch on each timed-out claim gets them all through."""
    conn = redis.asyncio.Redis.from_url(private.url, socket_timeout=0.25)
    q = echomq.Queue(conn, "big")
    # The test's own view, on a connection without the short timeout (the server is busy
    # for the length of each big claim, and every client waits meanwhile); the jobs are
    # enqueued through it too: an 8 MB enqueue may itself take 250 ms on a busy machine.
    view = redis.asyncio.Redis.from_url(private.url)
    seen = echomq.Queue(view, "big")
    blob = "x" * 8_000_000
    ids = [await seen.lanes.enqueue(f"l{i % 3}", blob) for i in range(24)]
    runs = Counter[str]()
    smallest = 32

    async def handler(claim: echomq.Claim) -> None:
        nonlocal smallest
        runs[claim.job_id] += 1
        smallest = min(smallest, c.batch_now)

    c = echomq.Consumer(q, handler, concurrency=32, batch=32, reap_interval_ms=200)
    task = asyncio.create_task(c.run())
    t = time.monotonic()
    try:
        await wait_for(lambda: completed(seen, 24), 40)
    finally:
        c.stop()
        await asyncio.wait_for(task, 20)
        await conn.aclose()
    stats = await seen.stats()
    await view.aclose()
    print(
        f"\n[limits] 24 x 8 MB, socket_timeout 250 ms: drained in {time.monotonic() - t:.1f} s,"
        f" batch down to {smallest}, {stats['counters'].get('claimed', 0)} leases,"
        f" failed={stats['counters'].get('failed', 0)}"
    )
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}
    assert smallest < 32
    assert stats["counters"].get("failed", 0) == 0 and stats["dead"] == 0


async def _true(value: bool) -> bool:
    return value


async def _state_is(q: echomq.Queue, worker_id: str, *states: str) -> bool:
    return (await _row(q, worker_id)).get("state") in states
