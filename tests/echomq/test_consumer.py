"""The Consumer against the real server: completion, retries, lost leases, parking,
a SIGKILLed holder, a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import echomq

Runner = Callable[..., Awaitable[echomq.Consumer]]


@contextlib.asynccontextmanager
async def running_consumers(q: echomq.Queue) -> AsyncIterator[Runner]:
    """``start(handler, **options)`` runs a consumer of ``q`` in this loop (heartbeats and
    reaps every 100 ms unless told otherwise); every one is stopped and awaited on exit."""
    running: list[tuple[echomq.Consumer, asyncio.Task[None]]] = []

    async def start(handler: echomq.Handler, **kw: Any) -> echomq.Consumer:
        kw.setdefault("heartbeat_ms", 100)
        kw.setdefault("reap_interval_ms", 100)
        c = echomq.Consumer(q, handler, **kw)
        running.append((c, asyncio.create_task(c.run())))
        return c

    try:
        yield start
    finally:
        for c, _ in running:
            c.stop()
        await asyncio.wait_for(asyncio.gather(*(t for _, t in running)), 20)


@pytest.fixture
async def start_consumer(q: echomq.Queue) -> AsyncIterator[Runner]:
    """Start consumers in this loop; every one is stopped and awaited at teardown."""
    async with running_consumers(q) as start:
        yield start


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


async def completed(q: echomq.Queue, n: int) -> bool:
    return (await q.stats())["counters"].get("completed", 0) >= n


async def test_consumer_completes_every_job_with_the_handler_result(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    seen: list[str] = []

    async def handler(claim: echomq.Claim) -> dict[str, Any]:
        seen.append(claim.job_id)
        return {"double": claim.payload * 2}

    ids = [await q.lanes.enqueue(f"lane{i % 7}", i) for i in range(200)]
    await start_consumer(handler, concurrency=8, batch=16)
    await wait_for(lambda: completed(q, 200))
    assert sorted(seen) == sorted(ids)
    info = await q.jobs.get(ids[3])
    assert info is not None and info.result == {"double": 6} and info.state == "completed"


async def test_handler_exception_fails_then_retries(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    calls = Counter[str]()

    async def handler(claim: echomq.Claim) -> str:
        calls[claim.job_id] += 1
        if calls[claim.job_id] < 3:
            raise echomq.Retry(50, "not yet")
        return "ok"

    jid = await q.jobs.enqueue("x")
    await start_consumer(handler, source="jobs")
    await wait_for(lambda: completed(q, 1))
    info = await q.jobs.get(jid)
    assert info is not None and info.failures == 2 and info.attempts == 3
    assert info.error == "Retry: not yet"


async def test_lost_lease_cancels_the_handler(q: echomq.Queue, start_consumer: Runner) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    jid = await q.lanes.enqueue("p", "x")
    c = await start_consumer(handler, lease_ms=300, reaper=False)
    await asyncio.wait_for(started.wait(), 5)
    # Someone else takes the job: expire its lease on the server and reap it.
    await q.conn.zadd(q.keys.active, {jid: 0}, xx=True)
    assert await q.stalled.reap() == [jid]
    await asyncio.wait_for(cancelled.wait(), 2)  # next extend (every lease/3) sees it lost
    assert c.counts.lost == 1 and c.counts.completed == 0


async def test_idle_consumer_parks_instead_of_polling(
    q: echomq.Queue, start_consumer: Runner, valkey_url: str
) -> None:
    """At most 5 commands a second sent by clients while idle (MONITOR shows script-internal
    commands as coming from "lua"; those are not sent by any client and are not counted)."""
    import redis.asyncio

    mon_conn = redis.asyncio.Redis.from_url(valkey_url)
    counts = Counter[str]()

    async def handler(claim: echomq.Claim) -> None:
        return None

    # default timings: heartbeat and reaper once a second, parked BLPOP otherwise
    await start_consumer(handler, heartbeat_ms=1_000, reap_interval_ms=1_000)
    await asyncio.sleep(0.5)  # let it settle into parking
    window = 4.0
    try:
        async with mon_conn.monitor() as m:

            async def listen() -> None:
                async for cmd in m.listen():
                    if cmd.get("client_type") == "lua":
                        continue
                    if q.name in cmd.get("command", ""):
                        counts[cmd["command"].split()[0].upper()] += 1

            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(listen(), window)
    finally:
        await mon_conn.aclose()
    total = sum(counts.values())
    print(f"idle consumer sent {total} commands in {window:.0f} s: {dict(counts)}")
    assert total / window <= 5, counts
    # it is parked on the wake key, not sleeping blind
    clients = await q.conn.client_list()
    assert any(c.get("cmd") == "blpop" for c in clients), clients


async def test_parked_consumer_wakes_at_once_on_enqueue(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    done = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        done.set()

    await start_consumer(handler, park_max_ms=30_000)
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    await q.lanes.enqueue("p", "x")
    await asyncio.wait_for(done.wait(), 5)
    assert time.monotonic() - t0 < 1.0  # woken by the wake key, not by the 30 s timeout


async def test_parked_consumer_wakes_for_a_delayed_job(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    done = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        done.set()

    await start_consumer(handler, source="jobs", park_max_ms=30_000, reaper=False)
    await asyncio.sleep(0.2)
    await q.jobs.enqueue("later", delay_ms=400)
    await asyncio.wait_for(done.wait(), 5)  # the BLPOP timeout was bounded by the due time


def spawn_worker(
    valkey_url: str, queue: str, log: Path, mode: str, *extra: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.echomq.proc_worker",
            valkey_url,
            queue,
            str(log),
            mode,
            *extra,
        ],
        cwd=Path(__file__).parents[2],
    )


async def wait_for_line(log: Path, prefix: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith(prefix):
                    return line
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {prefix!r} line in {log}")


async def test_sigkilled_holder_job_is_reclaimed_and_completed_once(
    q: echomq.Queue, start_consumer: Runner, valkey_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = spawn_worker(valkey_url, q.name, log, "hang", "10000", "500")
    try:
        jid = await q.lanes.enqueue("p", {"n": 1})
        line = await wait_for_line(log, "start")
        _, started_id, token = line.split()
        assert started_id == jid
        proc.send_signal(signal.SIGKILL)
        t_kill = time.monotonic()
    finally:
        proc.kill()
        proc.wait()

    results: list[tuple[str, int]] = []

    async def handler(claim: echomq.Claim) -> str:
        results.append((claim.job_id, claim.token))
        return "rescued"

    await start_consumer(handler, reap_interval_ms=200)
    await wait_for(lambda: completed(q, 1), timeout=15)
    elapsed = time.monotonic() - t_kill
    assert results == [(jid, int(token) + 1)]
    # Back well before the 10 s lease: heartbeat lapse (0.5 s) + reap interval.
    assert elapsed < 5, elapsed
    # The killed worker's late completion (simulated with its token) is refused.
    assert await q.jobs.complete(jid, int(token), "zombie") is False
    info = await q.jobs.get(jid)
    assert info is not None and info.result == "rescued" and info.stalls == 1
    assert (await q.stats())["counters"]["completed"] == 1


async def test_sigterm_finishes_in_flight_job_then_leaves(
    q: echomq.Queue, valkey_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = spawn_worker(valkey_url, q.name, log, "slow")
    try:
        jid = await q.lanes.enqueue("p", 1)
        await wait_for_line(log, "start")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 15) == 0
    finally:
        proc.kill()
        proc.wait()
    text = log.read_text()
    assert f"done {jid}" in text and "stopped completed=1" in text
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "completed"
    assert await q.conn.zcard(q.keys.active) == 0
    assert await q.workers() == []


async def test_stop_releases_a_job_that_outlives_the_grace(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    started = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        started.set()
        await asyncio.sleep(30)

    jid = await q.lanes.enqueue("p", 1)
    c = echomq.Consumer(q, handler, grace_ms=100, heartbeat_ms=100)
    task = asyncio.create_task(c.run())
    await asyncio.wait_for(started.wait(), 5)
    c.stop()
    await asyncio.wait_for(task, 5)
    info = await q.jobs.get(jid)
    # released: pending, no delivery spent; the next claim carries token 2
    assert info is not None and info.state == "pending" and info.attempts == 1
    assert info.failures == 0 and info.stalls == 0 and c.counts.released == 1


async def test_skewed_client_clock_mints_and_reaps_the_same_leases(
    q: echomq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    await q.lanes.enqueue("p", 1)
    await q.lanes.enqueue("p", 2)
    honest = await q.lanes.claim("w", 1_000)
    skew_ns = 5 * 3600 * 10**9  # five hours fast
    real_ns, real_s = time.time_ns, time.time
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + skew_ns)
    monkeypatch.setattr(time, "time", lambda: real_s() + skew_ns / 1e9)
    skewed = await q.lanes.claim("w", 1_000)
    assert honest is not None and skewed is not None
    assert abs(skewed.lease_until_ms - honest.lease_until_ms) < 500
    assert await q.stalled.reap() == []  # a fast client clock reaps nothing early
    await asyncio.sleep(1.1)
    assert sorted(await q.stalled.reap()) == sorted([honest.job_id, skewed.job_id])


async def test_one_huge_lane_cannot_starve_fifty_small_ones(q: echomq.Queue) -> None:
    for start in range(0, 10_000, 50):
        await asyncio.gather(*(q.lanes.enqueue("masher", i) for i in range(start, start + 50)))
    small = [await q.lanes.enqueue(f"honest{i}", i) for i in range(50)]
    claimed = [c.job_id for _ in range(101) if (c := await q.lanes.claim("w", 60_000))]
    # Fair order: the masher's lane was activated first (it too was empty when its first
    # job came), then it is in the ring and alternates with the small lanes' activations:
    # small[i], with i + 1 activations ahead of it, is claimed at claim 2i + 3, within the
    # bound 2 * (i + 2); the masher is never kept waiting more than 2 claims.
    assert claimed[2::2] == small
    assert all(claimed.index(job) + 1 <= 2 * (i + 2) for i, job in enumerate(small))
    assert all(job not in small for job in claimed[1::2])


@pytest.mark.parametrize("prefetch", [0, 3])
async def test_a_consumer_leases_its_free_slots_plus_its_prefetch_and_no_more(
    q: echomq.Queue, start_consumer: Runner, prefetch: int
) -> None:
    gate = asyncio.Event()
    running = 0

    async def handler(claim: echomq.Claim) -> None:
        nonlocal running
        running += 1
        await gate.wait()

    for i in range(20):
        await q.lanes.enqueue(f"lane-{i % 4}", i)
    # No prefetch unless asked: the contract's "up to min(free slots, batch)" per claim.
    extra = {"prefetch": prefetch} if prefetch else {}
    c = await start_consumer(handler, concurrency=2, worker_id="WRK_pf", **extra)

    async def busy() -> bool:
        return running == 2 and await q.conn.scard(q.keys.worker_jobs("WRK_pf")) == 2 + prefetch

    await wait_for(busy)
    await asyncio.sleep(0.3)  # a claimer that over-leased would have done so by now
    assert await q.conn.scard(q.keys.worker_jobs("WRK_pf")) == 2 + prefetch
    assert len(c.in_flight) == 2 + prefetch and len(c.running) == 2
    gate.set()
    await wait_for(lambda: completed(q, 20))


async def test_only_a_job_whose_holder_died_travels_alone(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    # Two jobs whose holder died (reaped: one stall each) ...
    stalled = [await q.lanes.enqueue(f"s{i}", i) for i in range(2)]
    assert len((await q.lanes.claim_many("w-dying", 100, 2)).claims) == 2
    await asyncio.sleep(0.15)
    assert sorted(await q.stalled.reap()) == sorted(stalled)
    # ... and two that were only handed back: redelivered too, but their holder lived.
    handed = [await q.lanes.enqueue(f"h{i}", i) for i in range(2)]
    for claim in (await q.lanes.claim_many("w-living", 60_000, 4)).claims:
        assert await q.jobs.release(claim.job_id, claim.token)

    gate = asyncio.Event()
    started: list[echomq.Claim] = []

    async def handler(claim: echomq.Claim) -> None:
        started.append(claim)
        await gate.wait()

    c = await start_consumer(handler, concurrency=4, worker_id="WRK_alone")
    await wait_for(lambda: _true(len(started) >= 3))
    await asyncio.sleep(0.3)  # time to claim more, if it would
    # One claim of all four: one suspect kept, the other handed back at once; the handed
    # back jobs are no suspects and run beside it. Nothing more while the suspect runs.
    assert all(x.token > 1 for x in started)
    assert sorted(x.stalls for x in started) == [0, 0, 1]
    assert {x.job_id for x in started} >= set(handed)
    assert c.counts.released == 1 and len(started) == 3
    gate.set()
    await wait_for(lambda: completed(q, 4))


async def _true(value: bool) -> bool:
    return value


async def test_after_a_batch_of_suspects_the_consumer_claims_one_at_a_time(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    # Six jobs whose holder died, on six lanes: each must run alone. A consumer with free
    # slots would lease them all on every claim and hand back all but one, over and over;
    # once a claim brought suspects it asks for one job at a time instead.
    stalled = [await q.lanes.enqueue(f"s{i}", i) for i in range(6)]
    assert len((await q.lanes.claim_many("w-dying", 100, 6)).claims) == 6
    await asyncio.sleep(0.15)
    assert sorted(await q.stalled.reap()) == sorted(stalled)
    claimed_before = (await q.stats())["counters"]["claimed"]

    async def handler(claim: echomq.Claim) -> None:
        await asyncio.sleep(0.02)

    await start_consumer(handler, concurrency=8, worker_id="WRK_careful")
    await wait_for(lambda: completed(q, 6))
    leases = (await q.stats())["counters"]["claimed"] - claimed_before
    # 6 on the first claim (one kept, five handed back), then one per claim: 11. Without
    # the care it is 6 + 5 + 4 + 3 + 2 + 1 = 21.
    assert leases <= 12, leases
