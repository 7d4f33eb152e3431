"""Each Lua transition against the real server, including every stale and no-op path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
import echomq.ids
from tests.echomq.conftest import locations, snapshot

LEASE = 5_000


async def test_enqueue_existing_id_is_a_noop_returning_it(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue({"a": 1})
    before = await snapshot(q)
    assert await q.jobs.enqueue({"a": 2}, job_id=jid) == jid
    assert await snapshot(q) == before
    info = await q.jobs.get(jid)
    assert info is not None and info.payload == {"a": 1} and info.state == "pending"


async def test_lane_enqueue_existing_id_returns_original_seq(q: echomq.Queue) -> None:
    first = await q.lanes.submit("p", {"g": 1}, seq_scope="r1")
    again = await q.lanes.submit("p", {"g": 9}, job_id=first.job_id, seq_scope="r1")
    assert again == echomq.Enqueued(first.job_id, 0, False)
    nxt = await q.lanes.submit("p", {"g": 2}, seq_scope="r1")
    assert nxt.seq == 1  # the replay took no number


async def test_ids_are_branded_and_monotonic(q: echomq.Queue) -> None:
    ids = [await q.jobs.enqueue(i) for i in range(50)]
    assert all(echomq.ids.is_branded(i, "JOB") for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == 50


async def test_plain_claim_is_fifo_and_mints_lease_on_server_clock(q: echomq.Queue) -> None:
    ids = [await q.jobs.enqueue(i) for i in range(3)]
    now = await q.server_time_ms()
    claim = await q.jobs.claim("w1", LEASE)
    assert claim is not None and claim.job_id == ids[0] and claim.token == 1
    assert claim.lane is None and claim.payload == 0
    assert now + LEASE <= claim.lease_until_ms <= now + LEASE + 1000
    assert await locations(q, ids[0]) == ["active"]
    assert await q.conn.zscore(q.keys.active, ids[0]) == claim.lease_until_ms


async def test_claim_on_empty_queue_returns_none(q: echomq.Queue) -> None:
    assert await q.jobs.claim("w", LEASE) is None
    assert await q.lanes.claim("w", LEASE) is None


async def test_claim_many_leases_each_job_with_its_own_token(q: echomq.Queue) -> None:
    for i in range(5):
        await q.jobs.enqueue(i)
    batch = await q.jobs.claim_many("w", LEASE, 3)
    assert [c.payload for c in batch.claims] == [0, 1, 2]
    assert all(c.token == 1 for c in batch.claims)
    assert (await q.stats())["active"] == 3


async def test_complete_counts_once_and_a_repeat_of_its_own_token_is_true(
    q: echomq.Queue,
) -> None:
    await q.jobs.enqueue("x")
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    assert await q.jobs.complete(c.job_id, c.token, {"r": 1}) is True
    before = await snapshot(q)
    # A batch re-sent after a lost reply: True again, and nothing at all changes (no
    # second count, no second event, not even a refusal).
    assert await q.jobs.complete(c.job_id, c.token, {"r": 1}) is True
    assert await q.jobs.complete_many([(c.job_id, c.token, {"r": 1})]) == [True]
    assert await snapshot(q) == before
    # Any other token on the completed job is stale.
    assert await q.jobs.complete(c.job_id, c.token + 1, {"r": 2}) is False
    assert await q.jobs.complete(c.job_id, c.token - 1, {"r": 2}) is False
    after = await snapshot(q)
    # Only the refusal tally moves; job, locations, counters and events do not.
    refused = q.keys.refused
    assert {k: v for k, v in after.items() if k != refused} == {
        k: v for k, v in before.items() if k != refused
    }
    info = await q.jobs.get(c.job_id)
    assert info is not None and info.state == "completed" and info.result == {"r": 1}
    assert (await q.stats())["counters"]["completed"] == 1


@pytest.mark.parametrize("op", ["complete", "fail", "extend", "release"])
async def test_stale_token_changes_nothing(q: echomq.Queue, op: str) -> None:
    await q.lanes.enqueue("p", "x")
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    before = await snapshot(q)
    stale = c.token + 1
    calls: dict[str, Any] = {
        "complete": lambda: q.jobs.complete(c.job_id, stale, 1),
        "fail": lambda: q.jobs.fail(c.job_id, stale, "boom"),
        "extend": lambda: q.jobs.extend(c.job_id, stale, LEASE),
        "release": lambda: q.jobs.release(c.job_id, stale),
    }
    assert await calls[op]() in (False, "stale")
    after = await snapshot(q)
    assert after.pop(q.keys.refused) == {op.encode(): b"1"}
    assert before == after


@pytest.mark.parametrize("op", ["complete", "fail", "extend", "release"])
async def test_calls_on_a_job_that_is_not_active_are_stale(q: echomq.Queue, op: str) -> None:
    jid = await q.jobs.enqueue("x")  # pending: attempts 0
    before = await snapshot(q)
    calls: dict[str, Any] = {
        "complete": lambda: q.jobs.complete(jid, 0),
        "fail": lambda: q.jobs.fail(jid, 0, "e"),
        "extend": lambda: q.jobs.extend(jid, 0, LEASE),
        "release": lambda: q.jobs.release(jid, 0),
    }
    assert await calls[op]() in (False, "stale")
    after = await snapshot(q)
    after.pop(q.keys.refused)
    assert before == after
    # and on a job that does not exist at all
    assert await {
        "complete": lambda: q.jobs.complete("JOB_nope", 1),
        "fail": lambda: q.jobs.fail("JOB_nope", 1, "e"),
        "extend": lambda: q.jobs.extend("JOB_nope", 1, LEASE),
        "release": lambda: q.jobs.release("JOB_nope", 1),
    }[op]() in (False, "stale")


async def test_extend_moves_the_deadline_on_the_server_clock(q: echomq.Queue) -> None:
    await q.jobs.enqueue("x")
    c = await q.jobs.claim("w", 1_000)
    assert c is not None
    now = await q.server_time_ms()
    assert await q.jobs.extend(c.job_id, c.token, 60_000)
    deadline = await q.conn.zscore(q.keys.active, c.job_id)
    assert now + 60_000 <= deadline <= now + 61_000


async def test_fail_schedules_with_backoff_then_promotes(q: echomq.Queue) -> None:
    q.settings = echomq.Settings(backoff_ms=200, jitter=0.2)
    q2 = echomq.Queue(q.conn, q.name, q.settings)
    jid = await q2.lanes.enqueue("p", "x")
    c = await q2.lanes.claim("w", LEASE)
    assert c is not None
    now = await q2.server_time_ms()
    assert await q2.jobs.fail(jid, c.token, "boom") == "scheduled"
    due = await q2.conn.zscore(q2.keys.scheduled, jid)
    assert now + 160 - 5 <= due <= now + 240 + 50
    assert await locations(q2, jid) == ["scheduled"]
    assert await q2.lanes.claim("w", LEASE) is None  # not due yet
    await asyncio.sleep(0.3)
    c2 = await q2.lanes.claim("w", LEASE)  # claim promotes due jobs before popping
    assert c2 is not None and c2.job_id == jid and c2.token == 2
    info = await q2.jobs.get(jid)
    assert info is not None and info.failures == 1 and info.error == "boom"


async def test_fail_with_explicit_delay_and_backoff_cap(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue("x", max_attempts=10)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    now = await q.server_time_ms()
    assert await q.jobs.fail(jid, c.token, "later", retry_in_ms=30_000) == "scheduled"
    due = await q.conn.zscore(q.keys.scheduled, jid)
    assert now + 30_000 <= due <= now + 30_100


async def test_last_failure_dead_letters_with_events_failed_then_dead(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x", max_attempts=2)
    for attempt in (1, 2):
        await q.conn.zadd(q.keys.scheduled, {jid: 0}, xx=True)  # make any retry due now
        c = await q.lanes.claim("w", LEASE)
        assert c is not None and c.token == attempt
        outcome = await q.jobs.fail(jid, c.token, f"boom {attempt}")
    assert outcome == "dead"
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "dead" and info.error == "boom 2"
    assert info.reason == "failed 2 times"
    assert await locations(q, jid) == ["dead"]
    events = [(e.type, e.job_id) for e in await q.events.since("0-0")]
    assert events[-2:] == [("failed", jid), ("dead", jid)]
    assert await q.lanes.load("p") == 0


async def test_release_returns_to_lane_without_spending_a_delivery(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x", max_attempts=1)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    assert await q.jobs.release(jid, c.token)
    info = await q.jobs.get(jid)
    # attempts counts deliveries: a release leaves it, the next claim makes it token + 1
    assert info is not None and info.state == "pending" and info.attempts == 1
    assert info.failures == 0 and info.stalls == 0
    assert not await q.jobs.complete(jid, c.token)  # the releasing holder is fenced off
    assert not await q.jobs.extend(jid, c.token, LEASE)  # by state: the job is pending
    c2 = await q.lanes.claim("w", LEASE)
    assert c2 is not None and c2.token == c.token + 1 and c2.stalls == 0  # no suspect
    assert not await q.jobs.complete(jid, c.token)  # the old token, now by value
    assert await q.jobs.complete(jid, c2.token)


async def test_reap_returns_expired_lease_to_its_lane(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x")
    c = await q.lanes.claim("w", 100)
    assert c is not None
    assert await q.stalled.reap() == []  # not yet expired
    await asyncio.sleep(0.15)
    assert await q.stalled.reap() == [jid]
    assert await locations(q, jid) == ["lane:p"]
    assert not await q.jobs.complete(jid, c.token)  # zombie completion refused
    info = await q.jobs.get(jid)
    assert info is not None and info.stalls == 1 and info.failures == 0
    assert [e.type for e in await q.events.since("0-0")] == ["reaped"]


async def test_poison_job_is_delivered_max_attempts_times_then_dead(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("poison", "x", max_attempts=3)
    deliveries = 0
    while (c := await q.lanes.claim("w", 50)) is not None:
        assert c.stalls == deliveries  # each claim says how often its holder died before
        deliveries += 1
        await asyncio.sleep(0.06)  # the worker "dies": the lease runs out
        await q.stalled.reap()
    assert deliveries == 3
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "dead"
    assert info.reason == "lease expired too often" and info.stalls == 3


async def test_lapsed_worker_jobs_are_reclaimed_before_the_lease(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x")
    await q.heartbeat("WRK_a", lapse_ms=100)
    c = await q.lanes.claim("WRK_a", 60_000)
    assert c is not None
    assert await q.stalled.reap() == []
    await asyncio.sleep(0.15)  # no heartbeat: the worker lapsed
    assert await q.stalled.reap() == [jid]
    assert await locations(q, jid) == ["lane:p"]
    assert [w.worker_id for w in await q.workers()] == []


async def test_live_heartbeat_prevents_early_reclaim(q: echomq.Queue) -> None:
    await q.lanes.enqueue("p", "x")
    await q.heartbeat("WRK_b", lapse_ms=300)
    c = await q.lanes.claim("WRK_b", 60_000)
    assert c is not None
    for _ in range(5):
        await asyncio.sleep(0.1)
        await q.heartbeat("WRK_b", lapse_ms=300)
        assert await q.stalled.reap() == []
    assert await q.jobs.complete(c.job_id, c.token)


async def test_delayed_enqueue_waits_in_scheduled(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue("later", delay_ms=200)
    assert await locations(q, jid) == ["scheduled"]
    batch = await q.jobs.claim_many("w", LEASE, 1)
    assert batch.claims == [] and batch.next_due_ms is not None
    assert 0 < batch.next_due_ms - batch.server_now_ms <= 200
    await asyncio.sleep(0.25)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and c.job_id == jid


async def test_retry_dead_keeps_attempts_and_resets_deliveries(q: echomq.Queue) -> None:
    jid = await q.lanes.enqueue("p", "x", max_attempts=1)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    assert await q.jobs.fail(jid, c.token, "boom") == "dead"
    with pytest.raises(echomq.InvalidState):
        await q.jobs.discard(await q.lanes.enqueue("p", "y"))
    await q.jobs.retry_dead(jid)
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "pending" and info.attempts == 1
    assert info.failures == 0 and info.error == "boom"
    with pytest.raises(echomq.InvalidState):
        await q.jobs.retry_dead(jid)
    with pytest.raises(echomq.JobNotFound):
        await q.jobs.retry_dead("JOB_missing")
    c2 = await q.lanes.claim("w", LEASE)
    assert c2 is not None and c2.job_id == jid and c2.token == 2


async def test_discard_deletes_a_dead_job(q: echomq.Queue) -> None:
    jid = await q.jobs.enqueue("x", max_attempts=1)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    await q.jobs.fail(jid, c.token, "boom")
    await q.jobs.discard(jid)
    assert await q.jobs.get(jid) is None and await locations(q, jid) == []


async def test_lane_full_refuses_and_changes_nothing(q: echomq.Queue) -> None:
    for i in range(2):
        await q.lanes.submit("p", i, max_pending=2, seq_scope="r")
    c = await q.lanes.claim("w", LEASE)  # active still counts against the cap
    assert c is not None
    before = await snapshot(q)
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit("p", 3, max_pending=2, seq_scope="r")
    assert await snapshot(q) == before
    await q.jobs.complete(c.job_id, c.token)
    assert (await q.lanes.submit("p", 3, max_pending=2, seq_scope="r")).seq == 2


async def test_deadline_refuses_and_changes_nothing(q: echomq.Queue) -> None:
    now = await q.server_time_ms()
    before = await snapshot(q)
    with pytest.raises(echomq.DeadlinePassed):
        await q.lanes.submit("p", 1, deadline_ms=now - 1, seq_scope="r")
    assert await snapshot(q) == before
    ok = await q.lanes.submit("p", 1, deadline_ms=now + 60_000, seq_scope="r")
    assert ok.created and ok.seq == 0


async def test_completed_rows_are_trimmed_by_count(q: echomq.Queue) -> None:
    small = echomq.Queue(q.conn, q.name, echomq.Settings(keep_completed=5))
    for i in range(100):
        await small.jobs.enqueue(i)
        c = await small.jobs.claim("w", LEASE)
        assert c is not None
        await small.jobs.complete(c.job_id, c.token)
        # trimmed in batches every 32 completions: never more than keep + 32 rows
        assert (await small.stats())["completed"] <= 5 + 32
    assert (await small.stats())["completed"] == 5 + 100 % 32  # last trim at #96
    rows = [k async for k in q.conn.scan_iter(match=f"{q.keys.prefix}job:*")]
    assert len(rows) == 5 + 100 % 32


async def test_completed_rows_are_trimmed_by_age(q: echomq.Queue) -> None:
    aged = echomq.Queue(q.conn, q.name, echomq.Settings(keep_completed_ms=1))
    for i in range(32):
        await aged.jobs.enqueue(i)
        c = await aged.jobs.claim("w", LEASE)
        assert c is not None
        await asyncio.sleep(0.002)
        await aged.jobs.complete(c.job_id, c.token)
    assert (await aged.stats())["completed"] <= 1


async def test_big_claim_batches_are_leased_whole(q: echomq.Queue) -> None:
    for start in range(0, 2_500, 50):
        await asyncio.gather(*(q.lanes.enqueue(f"l{i % 3}", i) for i in range(start, start + 50)))
    batch = await q.lanes.claim_many("w", LEASE, 2_500)
    assert len(batch.claims) == 2_500 and (await q.stats())["active"] == 2_500
    assert await q.conn.scard(q.keys.worker_jobs("w")) == 2_500


async def test_events_stream_is_capped(q: echomq.Queue) -> None:
    capped = echomq.Queue(q.conn, q.name, echomq.Settings(events_maxlen=10))
    for i in range(300):
        await capped.jobs.enqueue(i)
    for c in (await capped.jobs.claim_many("w", LEASE, 300)).claims:
        await capped.jobs.complete(c.job_id, c.token)
    # MAXLEN ~ trims whole stream nodes: at most one node's worth beyond the cap remains.
    node = int((await q.conn.config_get("stream-node-max-entries"))["stream-node-max-entries"])
    info = await q.conn.xinfo_stream(q.keys.events)
    assert info["entries-added"] >= 300
    assert info["length"] <= 10 + node < 300


async def test_scripts_reload_after_the_cache_is_flushed(q: echomq.Queue) -> None:
    await q.jobs.enqueue(1)
    await q.conn.script_flush()
    c = await q.jobs.claim("w", LEASE)
    assert c is not None
    await q.conn.script_flush()
    assert await q.jobs.complete_many([(c.job_id, c.token, None)]) == [True]


async def test_stats_counts_every_location(q: echomq.Queue) -> None:
    await q.lanes.enqueue("a", 1)
    await q.lanes.enqueue("a", 2)
    await q.lanes.enqueue("b", 3)
    await q.jobs.enqueue(4)
    await q.jobs.enqueue(5, delay_ms=60_000)
    await q.jobs.claim("w", LEASE)
    s = await q.stats()
    assert (s["pending"], s["active"], s["scheduled"]) == (3, 1, 1)
    assert s["lanes"] == {"a": 2, "b": 1}
    assert s["lane_count"] == 2


async def test_stats_lists_at_most_max_lanes_and_counts_the_rest(q: echomq.Queue) -> None:
    # 300 lanes, 2 jobs each: the snapshot lists the first 10 (served next first) but
    # counts every lane and every waiting job, without visiting the other 290.
    for i in range(300):
        await asyncio.gather(*(q.lanes.enqueue(f"l{i:03}", n) for n in range(2)))
    s = await q.stats(max_lanes=10)
    assert len(s["lanes"]) == 10 and set(s["lanes"].values()) == {2}
    assert (s["pending"], s["lane_count"]) == (600, 300)
    assert (await q.stats(max_lanes=0))["lanes"] == {}
    # claims, reaps and completions keep the running count exact
    await q.lanes.claim_many("w", 1, 250)
    assert (await q.stats(max_lanes=0))["pending"] == 350
    await asyncio.sleep(0.01)
    moved = await q.stalled.reap(limit=1000)
    assert len(moved) == 250
    assert (await q.stats(max_lanes=0))["pending"] == 600
    while claims := (await q.lanes.claim_many("w", LEASE, 100)).claims:
        await q.jobs.complete_many([(c.job_id, c.token, None) for c in claims])
    s = await q.stats(max_lanes=0)
    assert (s["pending"], s["lane_count"], s["completed"]) == (0, 0, 600)


async def test_a_drifted_lane_count_heals_once_the_lanes_drain(q: echomq.Queue) -> None:
    # A count left wrong (jobs put in lanes by a version that kept none) never goes
    # negative in stats and is reset by the first claim that finds every lane empty.
    await q.lanes.enqueue("a", 1)
    await q.conn.set(q.keys.in_lanes, -5)
    assert (await q.stats())["pending"] == 0
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    assert await q.conn.get(q.keys.in_lanes) is None
    await q.lanes.enqueue("a", 2)
    assert (await q.stats())["pending"] == 1
