"""The parts a Consumer is built of, each on its own: the lease keeper, the completion
outbox, the heartbeat, the reaper and its seats, the park, the outage, awaiting a handler,
the loops' error log. Against the real server where there is I/O."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

import echomq
from echomq.consumer.claims import LOST, ClaimRecord, ClaimTracker, Key, key_of
from echomq.consumer.heartbeat import Heartbeat
from echomq.consumer.leases import LeaseKeeper
from echomq.consumer.options import ConsumerOptions
from echomq.consumer.outage import Outage
from echomq.consumer.outbox import Outbox
from echomq.consumer.park import Park, Woken
from echomq.consumer.reaper import Reaper, ReaperSeats, seats
from echomq.consumer.running import await_handler
from echomq.consumer.trouble import Trouble, kind
from echomq.consumer.waits import every, until, wait_any
from echomq.hooks import HookChain
from echomq.jobs import decode_batch
from tests.echomq.conftest import locations

NO_HOOKS = HookChain(())


async def _claimed(q: echomq.Queue, n: int, lease_ms: int = 60_000) -> list[echomq.Claim]:
    for i in range(n):
        await q.jobs.enqueue(i)
    got = await q.jobs.claim_many("W", lease_ms, n)
    assert len(got.claims) == n
    return got.claims


# -- the lease keeper ----------------------------------------------------------------------


async def test_the_lease_keeper_renews_held_leases_and_loses_refused_ones(q: echomq.Queue) -> None:
    mine, reaped, finishing = await _claimed(q, 3, lease_ms=1_000)
    tracker = ClaimTracker()
    for c in (mine, reaped, finishing):
        tracker.hold(c)
    tracker.finish(key_of(finishing))
    lost: list[ClaimRecord] = []
    extended: list[list[str]] = []

    class Chain(HookChain):
        async def extended(self, claims: Any, verdicts: Any) -> None:
            extended.append([c.job_id for c in claims])

    keeper = LeaseKeeper(q, tracker, 30_000, lost.append, lambda: Chain(()))
    await q.jobs.release(reaped.job_id, reaped.token)  # its lease is no longer ours
    await keeper.renew()
    assert extended == [[mine.job_id, reaped.job_id]]  # a finishing claim is left alone
    assert [r.claim for r in lost] == [reaped]
    info = await q.jobs.get(mine.job_id)
    assert info is not None and info.lease_until_ms is not None
    assert info.lease_until_ms > await q.server_time_ms() + 20_000  # renewed for 30 s
    # A lost claim is not lost again; a stuck outcome's lease is renewed, its give-up time
    # left where its first error put it.
    tracker.lose(key_of(reaped))
    assert not tracker.give_up(key_of(finishing), 0.0, 0.001)
    lost.clear()
    extended.clear()
    await keeper.renew()
    assert lost == [] and finishing.job_id in extended[0]
    record = tracker.get(key_of(finishing))
    assert record is not None and record.give_up_at == 0.001


async def test_the_lease_keeper_sends_nothing_when_nothing_is_held(q: echomq.Queue) -> None:
    calls: list[str] = []

    class Chain(HookChain):
        async def extended(self, claims: Any, verdicts: Any) -> None:
            calls.append("extended")

    await LeaseKeeper(q, ClaimTracker(), 1_000, lambda r: None, lambda: Chain(())).renew()
    assert calls == []


# -- the outbox ------------------------------------------------------------------------------


async def test_the_outbox_sends_what_piled_up_in_one_batch(q: echomq.Queue) -> None:
    claims = await _claimed(q, 5)
    batches: list[int] = []

    async def send(items: Any) -> list[bool]:
        batches.append(len(items))
        return await q.jobs.complete_encoded(items)

    outbox = Outbox(send, lambda key: False)
    flusher = asyncio.create_task(outbox.flush_forever())
    try:
        verdicts = await asyncio.gather(
            *(outbox.complete_soon(c.job_id, c.token, b"null") for c in claims)
        )
        assert verdicts == [True] * 5 and batches == [5]
        # A stale completion (a token no longer the job's) answers False.
        assert await outbox.complete_soon(claims[0].job_id, claims[0].token + 1, b"null") is False
    finally:
        flusher.cancel()
    assert (await q.stats())["completed"] == 5


async def test_the_outbox_retries_a_failed_batch_and_then_sends_items_alone(
    q: echomq.Queue,
) -> None:
    good, bad = await _claimed(q, 2)
    sent: list[list[str]] = []

    async def send(items: Any) -> list[bool]:
        sent.append([job_id for job_id, _, _ in items])
        if any(job_id == bad.job_id for job_id, _, _ in items):
            raise ResponseError("ERR one bad item")
        return await q.jobs.complete_encoded(items)

    given_up: list[Key] = []

    def give_up(key: Key) -> bool:
        given_up.append(key)
        return given_up.count(key) >= 3  # the third error: its lease has run out

    outbox = Outbox(send, give_up)
    flusher = asyncio.create_task(outbox.flush_forever())
    try:
        results = await asyncio.gather(
            outbox.complete_soon(good.job_id, good.token, b"1"),
            outbox.complete_soon(bad.job_id, bad.token, b"2"),
        )
    finally:
        flusher.cancel()
    assert list(results) == [True, False]
    # After a server error each item goes alone: the good one is not held back by the bad.
    assert sent[0] == [good.job_id, bad.job_id] and [good.job_id] in sent[1:]
    assert await locations(q, good.job_id) == ["completed"]
    assert await locations(q, bad.job_id) == ["active"]  # left to the reaper


# -- the heartbeat ---------------------------------------------------------------------------


async def test_a_beat_writes_the_row_on_the_lapse_of_what_is_held(q: echomq.Queue) -> None:
    o = ConsumerOptions(worker_id="WRK_beat", lapse_ms=600, idle_heartbeat_ms=1_000)
    holding = False
    beat = Heartbeat(q, o, lambda: {"state": "idle"}, lambda: holding, asyncio.Event())
    assert await beat.beat() == o.idle_lapse_ms == 3_000  # holds nothing: the long lapse
    [worker] = [w for w in await q.workers() if w.worker_id == "WRK_beat"]
    assert worker.meta.get("state") == "idle"


async def test_the_heartbeat_keeps_the_busy_cadence_once_woken(q: echomq.Queue) -> None:
    o = ConsumerOptions(
        worker_id="WRK_cadence", lapse_ms=300, heartbeat_ms=100, idle_heartbeat_ms=5_000
    )
    beats = 0
    closing = asyncio.Event()

    def describe() -> dict[str, Any]:
        nonlocal beats
        beats += 1
        return {}

    hb = Heartbeat(q, o, describe, lambda: False, closing)
    loop = asyncio.create_task(hb.run())
    await asyncio.sleep(0.5)
    assert beats == 1  # idle: the next beat is seconds away
    hb.busy.set()  # a claim: beat now, then at the busy cadence
    await asyncio.sleep(0.1)
    assert beats == 2
    closing.set()
    await asyncio.wait_for(loop, 2)


# -- the reaper -----------------------------------------------------------------------------


async def test_a_reaper_turn_takes_the_lock_and_reaps_an_expired_lease(q: echomq.Queue) -> None:
    [c] = await _claimed(q, 1, lease_ms=100)
    await asyncio.sleep(0.15)
    kick = asyncio.Event()
    o = ConsumerOptions(worker_id="WRK_r1", lapse_ms=3_000, reap_interval_ms=1_000)
    pause_ms = await Reaper(q, o, asyncio.Event(), kick).turn()
    assert kick.is_set()  # jobs moved: the host claims at once
    assert await locations(q, c.job_id) == ["pending"]
    assert 800 <= pause_ms <= 3_000  # as leader: at least one reap interval (jitter: -20%)
    other = ConsumerOptions(worker_id="WRK_r2", lapse_ms=3_000, reap_interval_ms=1_000)
    follower_kick = asyncio.Event()
    wait = await Reaper(q, other, asyncio.Event(), follower_kick).turn()
    assert not follower_kick.is_set()
    assert 3_000 < wait <= o.reap_lock_ms + 20  # until the leader's lock may free up


async def test_the_reaper_loop_ends_when_closing(q: echomq.Queue) -> None:
    closing = asyncio.Event()
    o = ConsumerOptions(worker_id="WRK_r3")
    task = asyncio.create_task(Reaper(q, o, closing, asyncio.Event()).run())
    await asyncio.sleep(0.05)
    closing.set()
    await asyncio.wait_for(task, 2)


def test_a_queue_has_one_reaper_seat() -> None:
    s = ReaperSeats()
    assert s.take("a") and not s.take("a") and s.take("b")
    assert "a" in s
    s.leave("a")
    s.leave("a")  # freeing a free seat changes nothing
    assert "a" not in s and s.take("a")


def test_each_event_loop_has_seats_of_its_own() -> None:
    async def take() -> bool:
        return seats().take("q") and seats() is seats()

    assert asyncio.run(take())
    assert asyncio.run(take())  # a new loop: the seat a finished loop held is free


async def test_one_consumer_per_loop_hosts_a_queues_reaper(q: echomq.Queue) -> None:
    a = echomq.Consumer(q, lambda c: asyncio.sleep(0), heartbeat_ms=100)
    b = echomq.Consumer(q, lambda c: asyncio.sleep(0), heartbeat_ms=100)
    tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
    await asyncio.sleep(0.3)
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert sum(1 for t in asyncio.all_tasks() if t.get_name() == "reaper") == 1, names
    assert q.name in seats()
    a.stop()
    b.stop()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert q.name not in seats()  # freed for the next consumer to start


# -- the park --------------------------------------------------------------------------------


async def test_the_park_wakes_on_a_wake_token_and_keeps_its_own_connection(
    q: echomq.Queue,
) -> None:
    stopping = asyncio.Event()

    async def until_stop(aw: Any, *also: asyncio.Event) -> bool:
        return await until(aw, stopping, *also)

    park = Park(q, until_stop)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    parked = asyncio.create_task(park.wait(5_000, asyncio.Event()))
    await asyncio.sleep(0.1)
    await q.jobs.enqueue("x")  # pushes a wake token
    await asyncio.wait_for(parked, 2)
    assert loop.time() - t0 < 2
    assert park.conn is not None and park.conn is not q.conn
    kick = asyncio.Event()
    kicked = asyncio.create_task(park.wait(5_000, kick))
    await asyncio.sleep(0.05)
    kick.set()
    await asyncio.wait_for(kicked, 2)
    assert park.conn is None  # a kicked BLPOP's connection is dropped, not reused
    await park.drop()


def _park(q: echomq.Queue) -> Park:
    async def until_no_stop(aw: Any, *also: asyncio.Event) -> bool:
        return await until(aw, *also)

    return Park(q, until_no_stop)


async def test_a_claim_behind_the_park_runs_as_the_token_arrives(q: echomq.Queue) -> None:
    park = _park(q)
    await q.lanes.claim_many("w", 10_000, 1)  # the script known to the server (else NOSCRIPT)
    behind = q.lanes.claim_call("w", 10_000, 4, "CLM_behind")
    parked = asyncio.create_task(park.wait(5_000, asyncio.Event(), behind))
    await asyncio.sleep(0.1)
    jid = await q.lanes.enqueue("L", "x")
    woken = await asyncio.wait_for(parked, 2)
    assert not woken.lost
    batch = decode_batch(woken.reply)
    assert [c.job_id for c in batch.claims] == [jid]
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "active" and info.worker_id == "w"
    # Asked again under its id (what the consumer does when the answer is lost), the
    # claim answers the same job rather than leasing another.
    await q.lanes.enqueue("L", "y")
    again = await q.lanes.claim_many("w", 10_000, 4, claim_id="CLM_behind")
    assert [c.job_id for c in again.claims] == [jid]
    await park.drop()


async def test_a_park_that_times_out_still_runs_its_claim(q: echomq.Queue) -> None:
    park = _park(q)
    await q.lanes.claim_many("w", 10_000, 1)
    woken = await park.wait(50, asyncio.Event(), q.lanes.claim_call("w", 10_000, 4))
    assert not woken.lost and decode_batch(woken.reply).claims == []
    await park.drop()


async def test_a_kicked_park_says_its_claim_is_in_doubt(q: echomq.Queue) -> None:
    park, kick = _park(q), asyncio.Event()
    parked = asyncio.create_task(park.wait(5_000, kick, q.jobs.claim_call("w", 10_000, 4)))
    await asyncio.sleep(0.05)
    kick.set()
    woken = await asyncio.wait_for(parked, 2)
    assert woken.lost and woken.reply is None and park.conn is None
    assert (await park.wait(5_000, kick, q.jobs.claim_call("w", 10_000, 4))) == Woken()


async def test_a_claim_behind_the_park_refused_noscript_ran_nothing(q: echomq.Queue) -> None:
    park = _park(q)
    await q.jobs.claim_many("w", 1, 1)
    await q.conn.script_flush()  # as after a server restart
    parked = asyncio.create_task(park.wait(5_000, asyncio.Event(), q.jobs.claim_call("w", 1, 4)))
    await asyncio.sleep(0.05)
    jid = await q.jobs.enqueue("x")  # EVAL after its own NOSCRIPT: the claim's SHA stays unknown
    woken = await asyncio.wait_for(parked, 2)
    assert woken == Woken()  # neither an answer nor a doubt: the next claim goes as usual
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "pending"
    await park.drop()


# -- a dependency down -----------------------------------------------------------------------


def test_an_outage_begins_once_and_old_news_changes_nothing() -> None:
    o = Outage()
    assert not o.active and not o.answered_by(5.0)
    assert o.begin(started=1.0, error=echomq.Unavailable("db down"), now=2.0)
    assert o.active and o.why == "db down" and o.epoch == 1 and not o.resumed.is_set()
    assert not o.begin(started=1.5, error=echomq.Unavailable("again"), now=2.5)  # one wait
    assert not o.answered_by(1.0)  # started before the wait: says nothing of it
    assert o.answered_by(2.0)
    assert o.end(now=7.0) == 5.0
    assert not o.active and o.resumed.is_set()
    assert not o.begin(started=6.0, error=echomq.Unavailable(""), now=8.0)  # before the end
    assert o.begin(started=7.0, error=echomq.Unavailable(""), now=8.0)
    assert o.why == "Unavailable" and o.epoch == 2  # no message: the type's name


# -- awaiting a handler ------------------------------------------------------------------------


def _record() -> ClaimRecord:
    return ClaimTracker().hold(echomq.Claim("J", None, {}, echomq.Token(1, ""), 0))


async def test_a_handler_that_ends_is_done() -> None:
    task = asyncio.create_task(asyncio.sleep(0.01, "r"))
    assert await await_handler(_record(), task, timeout_ms=1_000) == "done"
    assert task.result() == "r"


async def test_a_handler_past_its_time_limit_is_cancelled() -> None:
    task = asyncio.create_task(asyncio.sleep(10))
    assert await await_handler(_record(), task, timeout_ms=20) == "timed out"
    assert task.cancelled()


async def test_a_lost_claims_handler_is_woken_and_cancelled() -> None:
    record = _record()
    task = asyncio.create_task(asyncio.sleep(10))
    waiting = asyncio.create_task(await_handler(record, task, timeout_ms=None))
    await asyncio.sleep(0.01)
    assert record.wake is not None
    record.state = LOST
    task.cancel()
    record.wake()
    assert await waiting == "done" and task.cancelled()
    assert record.wake is None


async def test_a_handler_that_ignores_cancellation_is_abandoned_when_lost() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue

    record = _record()
    record.state = LOST
    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    task.cancel()
    # (No time limit: only the claim being lost before the wait began ends it.)
    assert await asyncio.wait_for(await_handler(record, task, timeout_ms=None), 5) == "abandoned"
    release.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# -- waits and the loops' error log -----------------------------------------------------------


async def test_until_reports_whether_the_awaitable_finished() -> None:
    stop = asyncio.Event()
    assert await until(asyncio.sleep(0), stop)
    stop.set()
    assert not await until(asyncio.sleep(10), stop)
    with pytest.raises(RuntimeError):
        await until(_raise(RuntimeError("boom")), asyncio.Event())


async def _raise(exc: Exception) -> None:
    raise exc


async def test_wait_any_returns_at_the_first_event_or_the_timeout() -> None:
    a, b = asyncio.Event(), asyncio.Event()
    assert await wait_any(0.05, a, b) >= 0.04
    b.set()
    assert await wait_any(5, a, b) < 1


async def test_every_survives_errors_and_ends_when_closing() -> None:
    closing = asyncio.Event()
    calls = 0

    async def fn() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            closing.set()
        raise RedisConnectionError("down")

    await asyncio.wait_for(every(10, fn, closing, "test"), 2)
    assert calls == 3


def test_trouble_logs_each_kind_once_until_the_loop_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="echomq.consumer")
    t = Trouble("claim")
    t.note(RedisConnectionError("x"))
    t.note(RedisConnectionError("y"))
    t.note(ResponseError("OOM command not allowed"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    t.ok()
    t.ok()
    assert [r.message for r in caplog.records if r.levelno == logging.INFO] == ["claim recovered"]
    t.note(RedisConnectionError("z"))
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 3
    assert kind(ResponseError("READONLY you can't")) == "ResponseError READONLY"
    assert kind(ValueError()) == "ValueError"


# -- outcomes ----------------------------------------------------------------------------------


def _outcomes(q: echomq.Queue, tracker: ClaimTracker, lease_ms: int = 60_000) -> Any:
    from echomq.consumer.outcomes import Counts, Outcomes

    return Outcomes(q, tracker, lease_ms, "W", lambda: NO_HOOKS, Counts())


async def test_a_failure_is_recorded_under_its_token_and_counted(q: echomq.Queue) -> None:
    from echomq.consumer.outcomes import TimedOut

    a, b = await _claimed(q, 2)
    tracker = ClaimTracker()
    tracker.hold(a)
    tracker.hold(b)
    out = _outcomes(q, tracker)
    await out.fail(a, echomq.Retry(5_000, "later"))
    await out.fail(b, TimedOut("timed out"))
    assert out.counts.failed == 2 and out.counts.stale == 0
    info = await q.jobs.get(b.job_id)
    assert info is not None and info.state == "scheduled" and info.error == "timed out"
    await out.fail(a, ValueError("again"))  # no longer active: stale
    assert out.counts.stale == 1


async def test_a_release_spends_nothing_and_a_stale_one_is_counted_stale(q: echomq.Queue) -> None:
    [c] = await _claimed(q, 1)
    tracker = ClaimTracker()
    tracker.hold(c)
    out = _outcomes(q, tracker)
    assert await out.release(c)
    record = tracker.get(key_of(c))
    assert record is not None and record.state.value == "finishing"
    assert not await out.release(c)
    assert (out.counts.released, out.counts.stale) == (1, 1)
    assert await locations(q, c.job_id) == ["pending"]


async def test_an_outcome_that_keeps_failing_is_given_up_within_the_lease(q: echomq.Queue) -> None:
    [c] = await _claimed(q, 1)
    tracker = ClaimTracker()
    tracker.hold(c)
    # The same queue through a server that is not there: every call fails to connect.
    gone = redis.asyncio.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    out = _outcomes(echomq.Queue(gone, q.name), tracker, lease_ms=300)
    t0 = asyncio.get_running_loop().time()
    try:
        assert not await out.release(c)
    finally:
        await gone.aclose()
    assert 0.3 <= asyncio.get_running_loop().time() - t0 < 2
    assert out.counts.stale == 1 and out.counts.released == 0
    assert await locations(q, c.job_id) == ["active"]  # left to the reaper
    record = tracker.get(key_of(c))
    assert record is not None and record.give_up_at is None  # settled: no longer stuck


async def test_a_completion_goes_through_the_outbox_and_is_counted(q: echomq.Queue) -> None:
    [c] = await _claimed(q, 1)
    tracker = ClaimTracker()
    tracker.hold(c)
    out = _outcomes(q, tracker)
    flusher = asyncio.create_task(out.outbox.flush_forever())
    verdicts: list[tuple[str, int]] = []
    called = asyncio.Event()

    def then(claim: echomq.Claim) -> None:
        verdicts.append((claim.job_id, out.counts.completed + out.counts.stale))
        called.set()

    try:
        out.complete_soon(c, b'{"ok": 1}', then)
        assert verdicts == []  # the caller goes on; the verdict comes later
        await asyncio.wait_for(called.wait(), 5)
        called.clear()
        # The same token again: counted once by the server.
        out.complete_soon(c, b"null", then)
        await asyncio.wait_for(called.wait(), 5)
    finally:
        flusher.cancel()
    info = await q.jobs.get(c.job_id)
    assert info is not None and info.state == "completed" and info.result == {"ok": 1}
    # Each callback came once its own verdict was counted.
    assert verdicts == [(c.job_id, 1), (c.job_id, 2)]
    assert out.counts.completed + out.counts.stale == 2


async def test_suspects_beyond_the_first_go_back_at_once(q: echomq.Queue) -> None:
    a, b = await _claimed(q, 2)
    out = _outcomes(q, ClaimTracker())
    assert await out.release_suspects([a, b]) is False  # no error: nothing left unsure
    assert out.counts.released == 2
    assert await locations(q, a.job_id) == await locations(q, b.job_id) == ["pending"]
    assert await out.release_suspects([a]) is False  # stale: refused, not an error
    assert out.counts.released == 2


async def test_jobs_leased_by_a_claim_whose_answer_was_lost_are_handed_back(
    q: echomq.Queue,
) -> None:
    await q.heartbeat("W", 3_000)  # a registered worker: the server records what it holds
    known, orphan = await _claimed(q, 2)
    out = _outcomes(q, ClaimTracker())
    await out.release_orphans({known.job_id})
    assert out.counts.released == 1
    assert await locations(q, orphan.job_id) == ["pending"]
    assert await locations(q, known.job_id) == ["active"]
