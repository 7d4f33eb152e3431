"""One reaper per queue, and rare idle beats, without slower recovery (issue 11, item 11)."""

from __future__ import annotations

import asyncio

import echomq
from tests.echomq.conftest import locations
from tests.echomq.test_consumer import Runner, start_consumer, wait_for

_ = start_consumer  # the fixture, shared with test_consumer


async def test_one_reaper_holds_the_lock_until_it_stops_or_lapses(q: echomq.Queue) -> None:
    a = await q.stalled.sweep("A", lock_ms=5_000, horizon_ms=3_000)
    assert a.leader and a.moved == []
    b = await q.stalled.sweep("B", lock_ms=5_000, horizon_ms=3_000)
    assert not b.leader and 4_000 < b.wait_ms <= 5_000  # until the lock may free up
    # An expired lease is B's to see only once it holds the lock: nothing moved meanwhile.
    jid = await q.jobs.enqueue("x")
    assert await q.jobs.claim("W", 60_000) is not None
    await q.conn.zadd(q.keys.active, {jid: 0}, xx=True)
    assert (await q.stalled.sweep("B", lock_ms=5_000, horizon_ms=3_000)).moved == []
    assert await locations(q, jid) == ["active"]
    # A stops cleanly: the lock is freed at once.
    await q.heartbeat("A", 3_000)
    await q.unregister("A")
    b = await q.stalled.sweep("B", lock_ms=100, horizon_ms=3_000)
    assert b.leader and b.moved == [jid]
    # B dies: its lock runs out and A takes over.
    await asyncio.sleep(0.15)
    assert (await q.stalled.sweep("A", lock_ms=5_000, horizon_ms=3_000)).leader


async def test_the_leader_waits_until_something_can_come_due(q: echomq.Queue) -> None:
    idle = await q.stalled.sweep("A", lock_ms=5_000, horizon_ms=3_000)
    assert idle.wait_ms == 3_000  # nothing active: one lapse (a later claim's floor)
    await q.jobs.enqueue("x")
    assert await q.jobs.claim("W", 800) is not None
    busy = await q.stalled.sweep("A", lock_ms=5_000, horizon_ms=3_000)
    assert 600 <= busy.wait_ms <= 800  # the lease deadline
    await q.heartbeat("W", 300)
    beat = await q.stalled.sweep("A", lock_ms=5_000, horizon_ms=3_000)
    assert 100 <= beat.wait_ms <= 300  # the holder's heartbeat deadline


async def test_an_idle_worker_beats_on_the_long_lapse_and_a_claim_shortens_it(
    q: echomq.Queue,
) -> None:
    now, applied = await q.beat("W", 1_000, idle_lapse_ms=15_000)
    assert applied == 15_000
    assert await q.conn.zscore(q.keys.workers, "W") == now + 15_000
    await q.lanes.enqueue("l", "x")
    c = await q.lanes.claim("W", 60_000)
    assert c is not None
    deadline = await q.conn.zscore(q.keys.workers, "W")
    assert c.lease_until_ms - 60_000 + 1_000 == deadline  # claim time + the short lapse
    assert (await q.beat("W", 1_000, idle_lapse_ms=15_000))[1] == 1_000  # busy now
    assert await q.jobs.complete(c.job_id, c.token)
    assert (await q.beat("W", 1_000, idle_lapse_ms=15_000))[1] == 15_000  # idle again
    # A claim by a worker that is not registered registers nothing.
    await q.lanes.enqueue("l", "y")
    assert await q.lanes.claim("ghost", 60_000) is not None
    assert await q.conn.zscore(q.keys.workers, "ghost") is None


async def test_a_busy_consumer_is_never_on_the_idle_lapse(
    q: echomq.Queue,
    start_consumer: Runner,
) -> None:
    """While it holds a job its registry deadline stays within the short lapse, so its
    death is noticed as fast as before; idle again, it goes back to the long one."""
    release = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        await release.wait()

    c = await start_consumer(handler, lapse_ms=600, heartbeat_ms=200, idle_heartbeat_ms=2_000)
    assert c.options.idle_lapse_ms == 6_000
    await wait_for(lambda: _deadline_beyond(q, c.worker_id, 3_000))  # idle: the long lapse
    await q.lanes.enqueue("l", "x")
    await wait_for(lambda: _true(bool(c.running)))
    for _ in range(15):  # 1.5 s, several beats
        # The deadline first, then the clock: a beat in between is then no later than now.
        deadline = await q.conn.zscore(q.keys.workers, c.worker_id)
        now = await q.server_time_ms()
        assert deadline is not None and deadline <= now + 600
        await asyncio.sleep(0.1)
    release.set()
    await wait_for(lambda: _deadline_beyond(q, c.worker_id, 3_000))


async def _deadline_beyond(q: echomq.Queue, worker: str, ms: int) -> bool:
    deadline = await q.conn.zscore(q.keys.workers, worker)
    return deadline is not None and deadline > await q.server_time_ms() + ms


async def _true(value: bool) -> bool:
    return value


# -- outages (issue 11, item 10) ----------------------------------------------------------------


async def _held(q: echomq.Queue, worker: str, lane: str, lapse_ms: int) -> str:
    jid = await q.lanes.enqueue(lane, lane)
    await q.heartbeat(worker, lapse_ms)
    claim = await q.lanes.claim(worker, 60_000)
    assert claim is not None and claim.job_id == jid
    return jid


async def test_a_gap_in_sweeps_longer_than_a_live_queue_leaves_is_an_outage(
    q: echomq.Queue,
) -> None:
    # Nobody reached Valkey for 1.8 s (no sweep, no beat): the deadlines that passed then
    # say nothing of their holders. The first sweep after gives every holder a lapse
    # instead of reaping; a holder that then beats keeps its job, with no stall charged;
    # one that never beats again is reaped once its grace runs out, its stall counted.
    # (Sweeps after the outage come 0.25 s apart, far inside horizon + margin = 1 s, so a
    # loaded machine does not make them look like another outage.)
    lapse, margin = 600, 400
    assert (await q.stalled.sweep("R", 5_000, lapse, margin_ms=margin)).leader
    alive = await _held(q, "alive", "a", lapse)
    dead = await _held(q, "dead", "d", lapse)
    # A sweep while they hold their jobs: the queue was busy when it fell silent (after
    # an idle spell the grace is given too, but not counted as an outage).
    assert (await q.stalled.sweep("R", 5_000, lapse, margin_ms=margin)).moved == []
    await asyncio.sleep(1.8)  # > horizon + margin since R's last sweep
    after = await q.stalled.sweep("R", 5_000, lapse, margin_ms=margin)
    assert after.moved == []
    assert (await q.stats())["counters"]["outages"] == 1
    assert await locations(q, alive) == await locations(q, dead) == ["active"]
    moved: list[str] = []
    for _ in range(5):  # 1.25 s: past the dead one's grace (one lapse)
        await q.heartbeat("alive", lapse)
        await asyncio.sleep(0.25)
        await q.heartbeat("alive", lapse)
        moved += (await q.stalled.sweep("R", 5_000, lapse, margin_ms=margin)).moved
    assert moved == [dead]
    alive_info, dead_info = await q.jobs.get(alive), await q.jobs.get(dead)
    assert alive_info is not None and alive_info.state == "active" and alive_info.stalls == 0
    assert dead_info is not None and dead_info.state == "pending" and dead_info.stalls == 1
    assert (await q.stats())["counters"]["outages"] == 1  # the grace is not granted again


async def test_regular_sweeps_judge_a_silent_worker_as_before(q: echomq.Queue) -> None:
    # Sweeps went on (Valkey was reachable) while a worker stayed silent past its lapse:
    # no outage, it is reaped at once. The same with detection off (margin 0) after a gap.
    # (A 1 s margin: only a pause of 1.4 s between two sweeps would look like an outage.)
    lapse, margin = 400, 1_000
    silent = await _held(q, "silent", "s", lapse)
    moved: list[str] = []
    for _ in range(8):
        moved += (await q.stalled.sweep("R", 5_000, lapse, margin_ms=margin)).moved
        await asyncio.sleep(0.1)
    assert moved == [silent]
    info = await q.jobs.get(silent)
    assert info is not None and info.state == "pending" and info.stalls == 1
    assert (await q.stats())["counters"].get("outages", 0) == 0
    await q.heartbeat("other", lapse)
    again = await q.lanes.claim("other", 60_000)
    assert again is not None and again.job_id == silent
    await asyncio.sleep(1.2)
    assert (await q.stalled.sweep("R", 5_000, lapse)).moved == [silent]
