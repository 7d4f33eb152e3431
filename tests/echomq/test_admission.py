"""``Lanes.submit``'s admission checks inside the one enqueue script: dedup keys, the rate
limit per subject (a token bucket on the server clock), the pending cap per load subject,
and their order: exists -> dedup -> deadline -> rate -> cap, all before the first write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
from tests.echomq.conftest import snapshot

LEASE = 5_000
DAY_MS = 24 * 3600 * 1000


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


# -- dedup keys ---------------------------------------------------------------------------------


async def test_a_dedup_key_replays_the_original_receipt_and_changes_nothing(
    q: echomq.Queue,
) -> None:
    first = await q.lanes.submit("p", {"g": 1}, seq_scope="r", dedup=("k1", "fp-a", DAY_MS))
    assert first.created and first.seq == 0
    bound = await q.conn.hgetall(q.keys.dedup("k1"))
    assert {_text(k): _text(v) for k, v in bound.items()} == {
        "job": first.job_id,
        "fp": "fp-a",
        "seq": "0",
    }
    assert 0 < await q.conn.pttl(q.keys.dedup("k1")) <= DAY_MS
    before = await snapshot(q)
    again = await q.lanes.submit(
        "p", {"g": 1}, seq_scope="r", dedup=echomq.Dedup("k1", "fp-a", DAY_MS)
    )
    assert again == echomq.Enqueued(first.job_id, 0, False)
    assert await snapshot(q) == before  # nothing enqueued, no number taken
    assert (await q.lanes.submit("p", {"g": 2}, seq_scope="r")).seq == 1


async def test_a_dedup_key_with_another_fingerprint_is_a_conflict(q: echomq.Queue) -> None:
    first = await q.lanes.submit("p", {"g": 1}, seq_scope="r", dedup=("k1", "fp-a", DAY_MS))
    before = await snapshot(q)
    with pytest.raises(echomq.DedupConflict) as err:
        await q.lanes.submit("p", {"g": 2}, seq_scope="r", dedup=("k1", "fp-b", DAY_MS))
    assert err.value.job_id == first.job_id and err.value.key == "k1"
    assert await snapshot(q) == before


async def test_a_refused_enqueue_binds_no_dedup_key_and_takes_no_number(q: echomq.Queue) -> None:
    now = await q.server_time_ms()
    await q.lanes.submit("p", 0, max_pending=1, seq_scope="r")
    await q.lanes.submit("t", 0, rate_subject="s", rate_per_s=0.001, rate_burst=1)
    before = await snapshot(q)
    refusals: list[tuple[type[Exception], dict[str, Any]]] = [
        (echomq.DeadlinePassed, {"deadline_ms": now - 1}),
        (echomq.LaneFull, {"max_pending": 1}),
        (echomq.RateLimited, {"rate_subject": "s", "rate_per_s": 0.001, "rate_burst": 1}),
    ]
    for i, (error, kwargs) in enumerate(refusals):
        with pytest.raises(error):
            await q.lanes.submit("p", 1, seq_scope="r", dedup=(f"k{i}", "fp", DAY_MS), **kwargs)
    assert await snapshot(q) == before
    assert [k async for k in q.conn.scan_iter(match=f"{q.keys.prefix}dedup:*")] == []


async def test_a_replay_is_answered_after_the_deadline_and_over_the_limits(q: echomq.Queue) -> None:
    now = await q.server_time_ms()
    limits: dict[str, Any] = {
        "max_pending": 1,
        "rate_subject": "s",
        "rate_per_s": 0.001,
        "rate_burst": 1,
    }
    first = await q.lanes.submit(
        "p", 1, seq_scope="r", deadline_ms=now + 60_000, dedup=("k", "fp", DAY_MS), **limits
    )
    before = await snapshot(q)
    # the deadline has passed, the bucket is empty and the lane is full: still a replay
    again = await q.lanes.submit(
        "p", 1, seq_scope="r", deadline_ms=now - 1, dedup=("k", "fp", DAY_MS), **limits
    )
    assert again == echomq.Enqueued(first.job_id, 0, False)
    with pytest.raises(echomq.DedupConflict):  # and a conflict is a conflict
        await q.lanes.submit(
            "p", 2, seq_scope="r", deadline_ms=now - 1, dedup=("k", "other", DAY_MS), **limits
        )
    assert await snapshot(q) == before


async def test_the_checks_run_in_order_deadline_rate_cap(q: echomq.Queue) -> None:
    now = await q.server_time_ms()
    limits: dict[str, Any] = {
        "max_pending": 1,
        "rate_subject": "s",
        "rate_per_s": 0.001,
        "rate_burst": 1,
    }
    await q.lanes.submit("p", 1, **limits)  # the bucket is empty and the lane full now
    with pytest.raises(echomq.DeadlinePassed):
        await q.lanes.submit("p", 2, deadline_ms=now - 1, **limits)
    with pytest.raises(echomq.RateLimited):
        await q.lanes.submit("p", 2, **limits)
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit(
            "p", 2, max_pending=1, rate_subject="other", rate_per_s=0.001, rate_burst=1
        )


# -- the rate limit -----------------------------------------------------------------------------


async def test_the_rate_limit_allows_a_burst_then_refills_on_the_server_clock(
    q: echomq.Queue,
) -> None:
    # A burst of 3, then a token every 500 ms: a fourth submit right after the burst is
    # refused, unless the four took 500 ms of the server's clock (a loaded machine), when a
    # token has rightly come back; then the burst is tried again on a bucket of its own.
    # (At 50 ms a token, a loaded CI machine once took longer five bursts in a row.)
    for attempt in range(5):
        subject, scope = f"s{attempt}", f"r{attempt}"
        limit: dict[str, Any] = {"rate_subject": subject, "rate_per_s": 2, "rate_burst": 3}
        t0 = await q.server_time_ms()
        for i in range(3):
            assert (await q.lanes.submit("p", i, seq_scope=scope, **limit)).seq == i
        before = await snapshot(q)
        try:
            await q.lanes.submit("p", 3, seq_scope=scope, **limit)
        except echomq.RateLimited as refused:
            err = refused
            break
        elapsed = await q.server_time_ms() - t0
        assert elapsed >= 500, f"a submit past the burst was admitted after {elapsed} ms"
    else:
        pytest.fail("five bursts in a row each took longer than a token's refill")
    assert err.subject == subject
    assert 1 <= err.retry_after_ms <= 500  # one token every 500 ms
    # No token taken, no number, no job. An earlier attempt's bucket is left out: refilled,
    # it expires by itself, and CI once saw one lapse between the two snapshots.
    earlier = {q.keys.rate(f"s{n}") for n in range(attempt)}

    def settled(keys: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in keys.items() if k not in earlier}

    assert settled(await snapshot(q)) == settled(before)
    bucket = await q.conn.hgetall(q.keys.rate(subject))
    assert t0 <= int(bucket[b"ts"]) <= await q.server_time_ms()  # the server's TIME
    assert 0 < await q.conn.pttl(q.keys.rate(subject)) <= 3 * 500  # gone once refilled
    await asyncio.sleep(err.retry_after_ms / 1000 + 0.005)
    assert (await q.lanes.submit("p", 3, seq_scope=scope, **limit)).seq == 3
    # a subject of its own has a bucket of its own
    assert (await q.lanes.submit("p", 4, rate_subject="t", rate_per_s=20, rate_burst=3)).created
    await asyncio.sleep(1.6)  # refilled: the bucket key is gone, nothing left behind
    assert not await q.conn.exists(q.keys.rate(subject))


async def test_honest_pace_never_meets_the_rate_limit(q: echomq.Queue) -> None:
    # a token every 100 ms, a burst of 2: one enqueue every 120 ms is always admitted
    for i in range(8):
        await q.lanes.submit("p", i, rate_subject="s", rate_per_s=10, rate_burst=2)
        await asyncio.sleep(0.12)


async def test_rate_zero_is_off(q: echomq.Queue) -> None:
    for i in range(50):
        await q.lanes.submit("p", i, rate_subject="s", rate_per_s=0, rate_burst=0)
    assert await q.lanes.load("p") == 50
    assert not await q.conn.exists(q.keys.rate("s"))


# -- the pending cap per load subject -----------------------------------------------------------


async def test_a_shared_lane_keeps_the_cap_per_load_subject(q: echomq.Queue) -> None:
    def put(who: str, **kw: Any) -> Any:
        return q.lanes.submit("shared", {"who": who}, load_subject=who, max_pending=2, **kw)

    for who in ("a", "a", "b"):
        await put(who)
    with pytest.raises(echomq.LaneFull) as err:
        await put("a")
    assert err.value.lane == "a" and err.value.limit == 2
    await put("b")  # b has a cap of its own on the same lane
    assert (await q.lanes.load("a"), await q.lanes.load("b"), await q.lanes.load("shared")) == (
        2,
        2,
        0,
    )
    # completion unloads the job's subject, not the lane
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.payload == {"who": "a"}
    assert await q.jobs.complete(c.job_id, c.token)
    assert await q.lanes.load("a") == 1
    await put("a")
    # death unloads it too, and an operator's retry loads it again
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.payload == {"who": "a"}
    await q.conn.hset(q.keys.job(c.job_id), "max", 1)
    assert await q.jobs.fail(c.job_id, c.token, "boom") == "dead"
    assert await q.lanes.load("a") == 1
    await q.jobs.retry_dead(c.job_id)
    assert await q.lanes.load("a") == 2
    # the index behind the count lists exactly the unfinished jobs, oldest first
    open_a = [info.job_id for info in await q.lanes.unfinished("a")]
    assert len(open_a) == 2 and c.job_id in open_a
    assert {i.state for i in await q.lanes.unfinished("a")} == {"pending"}
    assert [i.job_id for i in await q.lanes.unfinished("a", limit=1)] == open_a[:1]


async def test_a_job_waiting_in_its_own_lane_takes_no_index_entry(q: echomq.Queue) -> None:
    # The lane counts its own waiting jobs; the open index holds them only while they are
    # out of it (active, scheduled): one sorted-set entry less per pending job.
    jid = await q.lanes.enqueue("p", {"i": 0})
    index = q.keys.open("p")
    assert (await q.conn.zcard(index), await q.lanes.load("p")) == (0, 1)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.job_id == jid
    assert (await q.conn.zcard(index), await q.lanes.load("p")) == (1, 1)
    assert await q.jobs.release(c.job_id, c.token)
    assert (await q.conn.zcard(index), await q.lanes.load("p")) == (0, 1)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    assert await q.jobs.fail(c.job_id, c.token, "boom", retry_in_ms=60_000) == "scheduled"
    assert (await q.conn.zcard(index), await q.lanes.load("p")) == (1, 1)
    assert [i.state for i in await q.lanes.unfinished("p")] == ["scheduled"]
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit("p", {"i": 1}, max_pending=1)


async def test_a_lane_shared_by_subjects_counts_each_job_once_against_its_subject(
    q: echomq.Queue,
) -> None:
    # Lane "a" holds two jobs of its own and one counted against "b"; lane "c" holds one
    # counted against "a". Each subject's load and list are exactly its own jobs.
    own = [await q.lanes.enqueue("a", {"i": i}) for i in range(2)]
    lent = (await q.lanes.submit("a", {"i": 2}, load_subject="b")).job_id
    borrowed = (await q.lanes.submit("c", {"i": 3}, load_subject="a")).job_id

    async def loads() -> tuple[int, ...]:
        return tuple([await q.lanes.load(s) for s in ("a", "b", "c")])

    assert await loads() == (3, 1, 0)
    assert [i.job_id for i in await q.lanes.unfinished("a")] == [*own, borrowed]
    assert [i.job_id for i in await q.lanes.unfinished("a", limit=2)] == own
    assert [i.job_id for i in await q.lanes.unfinished("b")] == [lent]
    assert await q.lanes.unfinished("c") == []
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit("a", {"i": 4}, max_pending=3)
    claims = [await q.lanes.claim("w", LEASE) for _ in range(4)]
    assert await loads() == (3, 1, 0)  # leased, still unfinished, still theirs
    assert {i.state for i in await q.lanes.unfinished("a")} == {"active"}
    for c in claims:
        assert c is not None and await q.jobs.complete(c.job_id, c.token)
    assert await loads() == (0, 0, 0)
    assert not await q.conn.exists(q.keys.foreign)  # no lane waits: the count is gone


async def test_a_job_lent_to_another_subject_leaves_room_under_its_lanes_cap(
    q: echomq.Queue,
) -> None:
    # Lane "a" holds one job of its own and one counted against "b": "a" has 1 unfinished
    # job, so a cap of 2 admits one more (the lane's depth alone would say 2: full).
    await q.lanes.enqueue("a", {"i": 0})
    await q.lanes.submit("a", {"i": 1}, load_subject="b")
    assert await q.conn.zcard(q.keys.lane("a")) == 2
    assert (await q.lanes.submit("a", {"i": 2}, max_pending=2)).created
    with pytest.raises(echomq.LaneFull):
        await q.lanes.submit("a", {"i": 3}, max_pending=2)


# -- argument checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_pending": -1},
        {"deadline_ms": -5},
        {"max_pending": True},
        {"load_subject": ""},
        {"dedup": ("", "fp", 1)},
        {"dedup": ("k", "", 1)},
        {"dedup": ("k", "fp", 0)},
        {"dedup": ("k", "fp")},
        {"rate_per_s": -1, "rate_subject": "s", "rate_burst": 1},
        {"rate_per_s": float("nan"), "rate_subject": "s", "rate_burst": 1},
        {"rate_per_s": float("inf"), "rate_subject": "s", "rate_burst": 1},
        {"rate_per_s": "10", "rate_subject": "s", "rate_burst": 1},
        {"rate_per_s": 10, "rate_burst": 1},
        {"rate_per_s": 10, "rate_subject": "s", "rate_burst": 0},
        {"rate_burst": -1},
    ],
)
async def test_bad_admission_arguments_are_value_errors(
    q: echomq.Queue, kwargs: dict[str, Any]
) -> None:
    before = await snapshot(q)
    with pytest.raises(ValueError):
        await q.lanes.submit("p", 1, **kwargs)
    assert await snapshot(q) == before
