"""web.deadlines: many tasks' deadlines on one timer, met within a tick."""

from __future__ import annotations

import asyncio
import time

import pytest

from web.deadlines import Deadlines


async def test_a_task_past_its_deadline_gets_timeout_error_within_a_tick() -> None:
    deadlines = Deadlines(0.2, tick=0.05)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        async with deadlines.within():
            await asyncio.sleep(10)
    took = time.monotonic() - began
    assert 0.2 <= took < 1.0, took
    assert len(deadlines) == 0


async def test_tasks_done_in_time_are_left_alone_and_the_timer_stops() -> None:
    deadlines = Deadlines(0.3, tick=0.05)

    async def quick(i: int) -> int:
        async with deadlines.within():
            await asyncio.sleep(0.01)
            return i

    assert await asyncio.gather(*(quick(i) for i in range(50))) == list(range(50))
    assert len(deadlines) == 0
    await asyncio.sleep(0.12)  # the timer's last tick finds nobody and is not renewed
    assert deadlines._timer is None


async def test_a_callers_own_cancel_stays_a_cancel() -> None:
    deadlines = Deadlines(5.0, tick=0.05)

    async def inside() -> None:
        async with deadlines.within():
            await asyncio.sleep(10)

    task = asyncio.ensure_future(inside())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(deadlines) == 0


async def test_only_the_late_one_of_many_is_cut() -> None:
    deadlines = Deadlines(0.15, tick=0.05)

    async def work(seconds: float) -> str:
        try:
            async with deadlines.within():
                await asyncio.sleep(seconds)
                return "done"
        except TimeoutError:
            return "late"

    assert await asyncio.gather(work(0.01), work(5), work(0.02)) == ["done", "late", "done"]


def test_one_deadlines_serves_loop_after_loop() -> None:
    """A loop that ends with a task inside leaves its timer behind, dead: the next loop's
    tasks still get their deadline."""
    deadlines = Deadlines(0.1, tick=0.05)

    async def inside() -> None:
        async with deadlines.within():
            await asyncio.sleep(5)

    async def leave_one_inside() -> None:
        asyncio.ensure_future(inside())  # cancelled when this loop shuts down
        await asyncio.sleep(0.01)

    async def late() -> float:
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            async with deadlines.within():
                await asyncio.sleep(5)
        return time.monotonic() - began

    asyncio.run(leave_one_inside())
    assert asyncio.run(late()) < 1.0


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        Deadlines(0)
    with pytest.raises(ValueError):
        Deadlines(1, tick=0)
