"""The reaper reclaims a lapsed worker's jobs by its job set, but the job rows decide.

A worker's job set (``wjobs:<worker>``) is an index the scripts keep in step with the rows.
Should it ever disagree (a restored snapshot, a hand edit), reclaiming by the index alone
would take a job from the worker that holds it now: reap.lua re-reads each row and stalls
only a job that is active and held by the lapsed worker. Found by the Lua mutation table
(tools/mutation/lua_mutants.py, ``reap-lapsed-any-worker``): no test reached this guard.
"""

from __future__ import annotations

import asyncio

import echomq
from tests.echomq.conftest import locations


async def test_a_lapsed_workers_stale_job_set_never_takes_another_holders_job(
    q: echomq.Queue,
) -> None:
    mine = await q.lanes.enqueue("p", "mine")
    theirs = await q.lanes.enqueue("r", "theirs")
    await q.heartbeat("WRK_old", lapse_ms=100)
    await q.heartbeat("WRK_new", lapse_ms=60_000)
    old = await q.lanes.claim("WRK_old", 60_000)
    new = await q.lanes.claim("WRK_new", 60_000)
    assert old is not None and new is not None
    assert {old.job_id, new.job_id} == {mine, theirs}
    # The index disagrees with the rows: WRK_old's set also names WRK_new's job.
    await q.conn.sadd(q.keys.worker_jobs("WRK_old"), new.job_id)
    await asyncio.sleep(0.15)  # WRK_old stops beating: it lapses
    assert await q.stalled.reap() == [old.job_id]  # its own job, and only that
    assert await locations(q, new.job_id) == ["active"]
    info = await q.jobs.get(new.job_id)
    assert info is not None and info.worker_id == "WRK_new" and info.stalls == 0
    assert await q.jobs.complete(new.job_id, new.token)
