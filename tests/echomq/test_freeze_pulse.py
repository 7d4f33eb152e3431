"""The reaper never charges the server's own silence to a live worker (issue 21, item 2),
at script level, deterministically: a freeze of D is played by moving every time the
queue stored (its pulse, heartbeat and lease deadlines, the reaper lock's life) D into
the past, which is exactly what the server finds on resuming from a SIGSTOP of D (its
clock ran on, nothing else did). Then the commands queued during the freeze land in the
worst order: a reap call first (by the lock's holder, or by a successor when the lock ran
out), before the live worker's beat; or another worker's beat first.

The production timings: lapse 3 s, a beat every 1 s, reap interval 1 s, lease 10 s, so a
gap of more than 1.5 s (``pulse_gap_ms``) is an outage. The real freezes (SIGSTOP on
valkey-server under worker processes) are in tests/chaos/test_freeze.py."""

from __future__ import annotations

import pytest

import echomq
from echomq.stalled import pulse_gap_ms

LAPSE, BEAT, REAP, LEASE = 3_000, 1_000, 1_000, 10_000
LOCK = max(REAP, LAPSE) + REAP
GAP = pulse_gap_ms(LAPSE, BEAT, REAP)
FREEZES = [x * 500 for x in range(2, 13)] + [10_000, 20_000, 30_000]


async def _age(q: echomq.Queue, ms: int, *, beat_earlier_ms: int = 0, silent: bool = True) -> None:
    """Every stored time ``ms`` into the past; the workers' beats ``beat_earlier_ms``
    more (they beat that long before the freeze began). ``silent=False``: time passed
    while the server answered (its pulse stays fresh)."""
    c = q.conn
    at = await c.hget(q.keys.prefix + "swept", "at")
    if at is not None and silent:
        await c.hset(q.keys.prefix + "swept", "at", int(at) - ms)
    for wid, score in await c.zrange(q.keys.workers, 0, -1, withscores=True):
        await c.zadd(q.keys.workers, {wid: score - ms - beat_earlier_ms})
    for jid, score in await c.zrange(q.keys.active, 0, -1, withscores=True):
        await c.zadd(q.keys.active, {jid: score - ms})
        await c.hset(q.keys.job(jid.decode()), "lease", int(score) - ms)
    ttl = await c.pttl(q.keys.prefix + "reaper")
    if ttl > 0:
        if ttl - ms > 0:
            await c.pexpire(q.keys.prefix + "reaper", ttl - ms)
        else:
            await c.delete(q.keys.prefix + "reaper")


async def _sweep(q: echomq.Queue, who: str) -> echomq.stalled.Sweep:
    return await q.stalled.sweep(who, LOCK, LAPSE, margin_ms=REAP, gap_ms=GAP)


async def _beat(q: echomq.Queue, who: str) -> None:
    await q.beat(who, LAPSE, gap_ms=GAP)


async def _setup(q: echomq.Queue, n: int) -> list[str]:
    jobs = []
    for w in ("live", "dead"):
        await _beat(q, w)
        for i in range(n):
            await q.lanes.enqueue(f"{w}{i}", {"w": w})
            c = await q.lanes.claim(w, LEASE)
            assert c is not None
            jobs.append(c.job_id)
    await _beat(q, "other")
    assert (await _sweep(q, "A")).leader
    return jobs


@pytest.mark.parametrize("first", ["holder", "successor", "other-beat"])
@pytest.mark.parametrize("beat_earlier_ms", [0, 500, 990])
async def test_no_freeze_from_1_to_30_s_reaps_a_live_worker(
    q: echomq.Queue, first: str, beat_earlier_ms: int
) -> None:
    """For each freeze D: after it, whoever lands first, nothing is reaped at once; the
    live worker's beat (right after) keeps its jobs; the dead worker (never beats again)
    has its jobs reaped one lapse later, its stall counted; the live one's never."""
    reaped_live = []
    for d in FREEZES:
        qd = echomq.Queue(q.conn, f"{q.name}-{d}-{first}-{beat_earlier_ms}")
        jobs = await _setup(qd, 2)
        live, dead = jobs[:2], jobs[2:]
        await _age(qd, d, beat_earlier_ms=beat_earlier_ms)
        if first == "other-beat":
            await _beat(qd, "other")
            moved = (await _sweep(qd, "A")).moved
        else:
            moved = (await _sweep(qd, "A" if first == "holder" else "B")).moved
        await _beat(qd, "live")
        for j in live:  # and renews its leases, as a consumer does on its next turn
            await qd.jobs.extend(j, 1, LEASE)
        moved += (await _sweep(qd, "A")).moved + (await _sweep(qd, "B")).moved
        reaped_live += [(d, j) for j in moved if j in live]
        assert [j for j in moved if j in dead] == [] or d <= 0, (d, moved)
        # One lapse on: the dead one's deadline (moved by the outage) has passed.
        await _age(qd, LAPSE + 10, silent=False)  # the server answering all along
        await _beat(qd, "live")
        later = (await _sweep(qd, "A")).moved + (await _sweep(qd, "B")).moved
        assert sorted(later) == sorted(dead), (d, later)
        for j in live:
            info = await qd.jobs.get(j)
            assert info is not None and info.state == "active" and info.stalls == 0, (d, info)
        for j in dead:
            info = await qd.jobs.get(j)
            assert info is not None and info.state == "pending" and info.stalls == 1, (d, info)
    assert reaped_live == []


async def test_regular_calls_judge_a_silent_worker_at_its_lapse(q: echomq.Queue) -> None:
    """No gap: a worker that stops beating is reaped as soon as its deadline passes, the
    other callers' beats and reap calls proving the server answered all along."""
    jobs = await _setup(q, 1)
    for _ in range(int(LAPSE / 500)):  # 3 s in 0.5 s steps: pulse every 0.5 s
        await _age(q, 500, silent=False)
        await _beat(q, "live")
        await _beat(q, "other")
        moved = (await _sweep(q, "A")).moved
        if moved:
            break
    assert moved == [jobs[1]]
    assert (await q.stats())["counters"].get("outages", 0) == 0


async def test_a_busy_queue_is_swept_within_half_the_gap(q: echomq.Queue) -> None:
    """While anything is active, every caller, the lock's holder and those waiting to take
    over, is told to call again within gap / 2: a live queue never leaves a gap that long,
    also when its reaper dies. An idle queue keeps its long waits."""
    idle = await _sweep(q, "A")
    assert idle.wait_ms == LAPSE
    assert (await _sweep(q, "B")).wait_ms > GAP  # the lock's time
    await _setup(q, 1)
    assert (await _sweep(q, "A")).wait_ms <= GAP // 2
    b = await _sweep(q, "B")
    assert not b.leader and b.wait_ms <= GAP // 2
