"""``q.schedules`` (docs/contract.md §3b): exactly one job per tick, whichever callers race
for it; the missed-tick policies; pause, resume, remove, list; consumers run them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
from echomq.schedules import cron_advance, tick_job_id
from tests.echomq.test_consumer import Runner, start_consumer, wait_for

_ = start_consumer  # the fixture, shared with test_consumer


async def _jobs(q: echomq.Queue, lane: str | None = None) -> list[echomq.JobInfo]:
    key = q.keys.lane(lane) if lane else q.keys.pending
    ids = [x.decode() if isinstance(x, bytes) else x for x in await q.conn.zrange(key, 0, -1)]
    infos = [await q.jobs.get(i) for i in ids]
    return [i for i in infos if i is not None]


async def _set_next(q: echomq.Queue, name: str, due: int) -> None:
    # Rewind the stored due time, as a downtime would leave it.
    await q.conn.hset(q.keys.schedule(name), "next", due)
    await q.conn.zadd(q.keys.schedules, {name: due})


async def test_a_due_tick_fires_once_with_its_time_whoever_races(q: echomq.Queue) -> None:
    first = await q.schedules.add("beat", {"k": 1}, every_ms=60_000, lane="L")
    assert (await q.schedules.run_due()).fired == 0  # not due yet: nothing sent but the read
    now = await q.server_time_ms()
    await _set_next(q, "beat", now - 10)
    turns = await asyncio.gather(*(q.schedules.run_due() for _ in range(8)))
    assert sum(t.fired for t in turns) == 1
    [job] = await _jobs(q, "L")
    assert job.scheduled_for_ms == now - 10 and job.payload == {"k": 1} and job.lane == "L"
    assert job.job_id == tick_job_id(q.name, "beat", now - 10)
    [info] = await q.schedules.list()
    assert info.next_due_ms == now - 10 + 60_000 and info.fired == 1 and info.missed == 0
    assert first > now - 60_000


async def test_a_stale_advance_is_refused(q: echomq.Queue) -> None:
    await q.schedules.add("s", "x", every_ms=60_000)
    now = await q.server_time_ms()
    await _set_next(q, "s", now - 5)
    keys = q.keys.script_keys(
        "schedule_tick", q.keys.schedule("s"), q.keys.job(tick_job_id(q.name, "s", now - 99))
    )
    from echomq.scripts import SCRIPTS

    # A caller that read an older due time changes nothing.
    kind, nxt = await q.runner.run(
        SCRIPTS["schedule_tick"], keys, ["s", now - 99, tick_job_id(q.name, "s", now - 99), 0, 0, 0]
    )
    assert int(kind) == 0 and int(nxt) == now - 5
    assert await _jobs(q) == []


async def test_skip_drops_missed_ticks_and_goes_on_after_now(q: echomq.Queue) -> None:
    await q.schedules.add("s", "x", every_ms=1_000, missed="skip")
    now = await q.server_time_ms()
    await _set_next(q, "s", now - 3_500)  # ticks at -3.5, -2.5, -1.5, -0.5 s all due
    assert (await q.schedules.run_due()).fired == 0
    info = await q.schedules.get("s")
    assert info is not None and info.fired == 0 and info.next_due_ms is not None
    # The first tick after the script's now (a busy machine may be a tick later than ours).
    assert info.next_due_ms in (now + 500, now + 1_500)
    assert info.missed == (info.next_due_ms - (now - 3_500)) // 1_000  # 4: each due tick
    assert await _jobs(q) == []


async def test_catch_up_one_fires_one_job_for_the_missed_ticks(q: echomq.Queue) -> None:
    await q.schedules.add("s", "x", every_ms=1_000, missed="catch_up_one")
    now = await q.server_time_ms()
    await _set_next(q, "s", now - 3_500)
    assert (await q.schedules.run_due()).fired == 1
    [job] = await _jobs(q)
    assert job.scheduled_for_ms == now - 3_500  # the oldest missed tick
    info = await q.schedules.get("s")
    assert info is not None and info.fired == 1 and info.next_due_ms in (now + 500, now + 1_500)
    assert info.missed == (info.next_due_ms - (now - 3_500)) // 1_000 - 1  # 3: folded in


async def test_pause_resume_remove_and_list(q: echomq.Queue) -> None:
    await q.schedules.add("a", 1, every_ms=50_000)
    # Once a year, so it is due after "a" whatever the time of the run (a */5 cron was due
    # first in the last 50 s before each fifth minute).
    await q.schedules.add("b", 2, cron="0 0 1 1 *", missed="catch_up_one")
    assert [s.name for s in await q.schedules.list()] == ["a", "b"]
    assert await q.schedules.pause("a") is True
    assert await q.schedules.pause("a") is False
    assert [s.name for s in await q.schedules.list()] == ["b", "a"]  # paused: last
    listed = {s.name: s for s in await q.schedules.list()}
    assert listed["a"].paused and listed["a"].next_due_ms is None
    assert listed["b"].cron == "0 0 1 1 *" and listed["b"].missed_policy == "catch_up_one"
    assert listed["b"].next_due_ms is not None and listed["b"].next_due_ms % 300_000 == 0
    # Paused: never due, however long ago its tick was.
    await q.conn.hset(q.keys.schedule("a"), "next", 1)
    assert (await q.schedules.run_due()).fired == 0
    now = await q.server_time_ms()
    nxt = await q.schedules.resume("a")
    assert nxt is not None and now + 50_000 <= nxt <= now + 51_000
    assert await q.schedules.resume("a") is None  # not paused: unchanged
    assert await q.schedules.remove("a") is True
    assert await q.schedules.remove("a") is False
    assert [s.name for s in await q.schedules.list()] == ["b"]
    with pytest.raises(KeyError):
        await q.schedules.pause("a")


async def test_a_cron_tick_fires_and_advances_to_the_next_cron_time(q: echomq.Queue) -> None:
    if (await q.server_time_ms()) % 2_000 > 1_200:  # a tick boundary could pass mid-test
        await asyncio.sleep(0.9)
    await q.schedules.add("c", "x", cron="*/2 * * * * *")  # every 2 s (seconds first)
    [info] = await q.schedules.list()
    assert info.next_due_ms is not None and info.next_due_ms % 2_000 == 0
    await _set_next(q, "c", info.next_due_ms - 2_000)  # the last cron time, just passed
    assert (await q.schedules.run_due()).fired == 1
    [job] = await _jobs(q)
    assert job.scheduled_for_ms == info.next_due_ms - 2_000
    after = await q.schedules.get("c")
    assert after is not None and after.next_due_ms == info.next_due_ms


def test_cron_advance_counts_the_due_ticks() -> None:
    # every minute; due at 0, now at 3.5 min: ticks at 1, 2, 3 min are due too.
    assert cron_advance("* * * * *", 0, 210_000) == (60_000, 240_000, 3)
    assert cron_advance("* * * * *", 0, 30_000) == (60_000, 60_000, 0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ValueError),
        ({"every_ms": 10, "cron": "* * * * *"}, ValueError),
        ({"every_ms": 0}, ValueError),
        ({"every_ms": 1.5}, TypeError),
        ({"cron": "nonsense"}, ValueError),
        ({"cron": 5}, TypeError),
        ({"every_ms": 10, "missed": "all"}, ValueError),
        ({"every_ms": 10, "lane": ""}, ValueError),
    ],
)
async def test_arguments_are_checked_before_anything_is_sent(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    q = echomq.Queue(object(), "never-sent")  # any call would fail on this connection
    with pytest.raises(error):
        await q.schedules.add("n", "x", **kwargs)
    with pytest.raises(TypeError):
        await q.schedules.add("n", {1, 2}, every_ms=10)
    with pytest.raises(ValueError):
        await q.schedules.remove("")


async def test_consumers_run_a_schedule_exactly_once_per_tick(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    seen: list[int] = []

    async def handler(claim: echomq.Claim) -> None:
        info = await q.jobs.get(claim.job_id)
        assert info is not None and info.scheduled_for_ms is not None
        seen.append(info.scheduled_for_ms)

    # Two consumers in this loop share one scheduler; the other loop's would race it: the
    # script refuses all but one either way (the chaos suite runs several processes).
    await start_consumer(handler, concurrency=2)
    first = await q.schedules.add("fast", "t", every_ms=50, lane="L", missed="catch_up_one")
    await wait_for(lambda: _fired(q, "fast", 20), timeout=20)
    await q.schedules.pause("fast")
    info = await q.schedules.get("fast")
    assert info is not None
    await wait_for(lambda: _completed(q, info.fired), timeout=20)
    assert len(seen) == len(set(seen)) == info.fired
    # Each tick on the grid from the first; missed ones (a busy machine) fold into one job.
    assert all((t - first) % 50 == 0 for t in seen)
    end = int(await q.conn.hget(q.keys.schedule("fast"), "next"))  # kept while paused
    assert max(seen) < end and (end - first) // 50 == info.fired + info.missed


async def test_a_schedule_added_elsewhere_wakes_an_idle_scheduler(
    q: echomq.Queue, start_consumer: Runner
) -> None:
    async def handler(claim: echomq.Claim) -> None:
        return None

    # Idle: the scheduler waits up to park_max_ms (15 s) for a tick; the add's wake token
    # ends that wait, so the first tick fires on time, not at the end of the wait.
    await start_consumer(handler, concurrency=1)
    await asyncio.sleep(0.5)
    other = q.using(q.conn)
    first = await other.schedules.add("soon", "x", every_ms=300, lane="L")
    await wait_for(lambda: _fired(q, "soon", 1), timeout=10)  # < 15 s: woken
    job = await q.jobs.get(tick_job_id(q.name, "soon", first))
    assert job is not None and job.scheduled_for_ms == first


async def _fired(q: echomq.Queue, name: str, n: int) -> bool:
    info = await q.schedules.get(name)
    return info is not None and info.fired >= n


async def _completed(q: echomq.Queue, n: int) -> bool:
    return (await q.stats())["counters"].get("completed", 0) >= n
