"""The batched transitions (issue 22): a complete call finishes many jobs, a claim writes
each structure once, and a job row is small enough to stay a listpack. Every verdict is
still per job, and a batch orders, fences and counts exactly as the single calls do."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
from echomq.checks import DEFAULT_MAX_ATTEMPTS
from echomq.codec import dumps, text
from echomq.jobs import COMPLETE_CHUNK

LEASE = 30_000
# The game's guess (codemojex.guesses): past Valkey's default hash-max-listpack-value (64).
GUESS = {
    "player_id": "PLR_01J9Z3K4WQ8N6V2T5R7X0M1C3E",
    "round_id": "RND_01J9Z3K0A2B4C6D8E0F2G4H6J8",
    "guess": ["🍎", "🍎", "🍇", "🍑"],
}


async def _events(q: echomq.Queue) -> list[dict[str, str]]:
    return [
        {text(k): text(v) for k, v in fields.items()}
        for _, fields in await q.conn.xrange(q.keys.events)
    ]


async def test_a_batch_judges_each_job_alone_and_counts_the_good_ones_once(
    q: echomq.Queue,
) -> None:
    for lane in ("a", "b", "c", "d"):
        await q.lanes.enqueue(lane, {"lane": lane})
    claims = (await q.lanes.claim_many("w", LEASE, 4)).claims
    assert len(claims) == 4
    a, b, c, d = claims
    assert await q.jobs.release(b.job_id, b.token) is True  # b is pending again: stale
    verdicts = await q.jobs.complete_many(
        [
            (a.job_id, a.token, {"r": "a"}),
            (b.job_id, b.token, None),
            (c.job_id, echomq.Token(c.token + 1, c.token.lease), None),  # not its token
            (d.job_id, echomq.Token(int(d.token), "0123456789abcdef"), None),  # not its lease
        ]
    )
    assert verdicts == [True, False, False, False]
    s = await q.stats()
    assert s["counters"]["completed"] == 1 and s["refused"]["complete"] == 3
    assert s["active"] == 2  # c and d, still held under their own leases
    done = [e for e in await _events(q) if e["type"] == "completed"]
    assert [e["job_id"] for e in done] == [a.job_id]
    assert done[0]["lane"] == "a" and done[0]["attempts"] == "1"
    assert done[0]["result"] == '{"r":"a"}'
    # the rest complete later, each under its own token
    assert await q.jobs.complete_many([(c.job_id, c.token, None), (d.job_id, d.token, None)]) == [
        True,
        True,
    ]
    s = await q.stats()
    assert (s["active"], s["counters"]["completed"]) == (0, 3)
    # each lane's load subject was unloaded, the worker's job set emptied
    assert [await q.lanes.load(lane) for lane in ("a", "c", "d")] == [0, 0, 0]
    assert await q.conn.exists(q.keys.worker_jobs("w")) == 0


async def test_a_job_named_twice_in_one_batch_is_counted_once(q: echomq.Queue) -> None:
    await q.lanes.enqueue("a", 1)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    stale = echomq.Token(c.token + 1, c.token.lease)
    verdicts = await q.jobs.complete_many(
        [(c.job_id, c.token, 1), (c.job_id, c.token, 1), (c.job_id, stale, 2)]
    )
    # the second is the same call repeated (True, nothing more); the third a stale one
    assert verdicts == [True, True, False]
    s = await q.stats()
    assert s["counters"]["completed"] == 1 and s["refused"]["complete"] == 1
    assert len([e for e in await _events(q) if e["type"] == "completed"]) == 1


async def test_a_long_list_of_completions_is_cut_into_calls_with_one_verdict_each(
    q: echomq.Queue,
) -> None:
    n = COMPLETE_CHUNK + 10
    for i in range(n):
        await q.jobs.enqueue(i)
    claims = (await q.jobs.claim_many("w", LEASE, n)).claims
    assert len(claims) == n
    items: list[tuple[str, int, Any]] = [(c.job_id, c.token, None) for c in claims]
    items[3] = (claims[3].job_id, claims[3].token + 5, None)
    verdicts = await q.jobs.complete_many(items)
    assert verdicts == [i != 3 for i in range(n)]
    s = await q.stats()
    assert (s["active"], s["counters"]["completed"]) == (1, n - 1)


async def test_a_claim_bumps_a_large_token_exactly(q: echomq.Queue) -> None:
    # attempts + 1 is computed in Lua (a double): it must still be written as an integer,
    # not as 1e+15, and equal the token handed out.
    jid = await q.jobs.enqueue("x", attempts=10**15)
    c = await q.jobs.claim("w", LEASE)
    assert c is not None and int(c.token) == 10**15 + 1
    assert await q.conn.hget(q.keys.job(jid), "attempts") == str(10**15 + 1).encode()
    assert await q.jobs.complete(jid, c.token) is True


async def test_a_pending_row_holds_no_id_no_zero_counts_and_no_state(q: echomq.Queue) -> None:
    plain = await q.jobs.enqueue(GUESS)
    lane = (await q.lanes.submit("PLR_x", GUESS, seq_scope="RND_y")).job_id
    plain_row = await q.conn.hgetall(q.keys.job(plain))
    lane_row = await q.conn.hgetall(q.keys.job(lane))
    # pending is a row with no state (a row that waits carries what no default covers:
    # no `max` at the default number of deliveries either)
    assert set(plain_row) == {b"body", b"enq"}
    assert set(lane_row) == {b"lane", b"body", b"enq", b"seq"}
    # and the readers still see every field
    info = await q.jobs.get(lane)
    assert info is not None
    assert (info.job_id, info.lane, info.seq, info.attempts, info.failures, info.stalls) == (
        lane,
        "PLR_x",
        0,
        0,
        0,
        0,
    )
    assert info.payload == GUESS and info.state == "pending"
    assert info.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert [i.job_id for i in await q.lanes.unfinished("PLR_x")] == [lane]


@pytest.mark.parametrize("source", ["lanes", "jobs"])
async def test_a_row_keeps_max_only_when_it_is_not_the_default(
    q: echomq.Queue, source: str
) -> None:
    async def enqueue(max_attempts: int) -> str:
        if source == "lanes":
            return await q.lanes.enqueue("PLR_x", GUESS, max_attempts=max_attempts)
        return await q.jobs.enqueue(GUESS, max_attempts=max_attempts)

    other = await enqueue(DEFAULT_MAX_ATTEMPTS + 1)
    default = await enqueue(DEFAULT_MAX_ATTEMPTS)
    assert await q.conn.hget(q.keys.job(other), "max") == str(DEFAULT_MAX_ATTEMPTS + 1).encode()
    assert await q.conn.hget(q.keys.job(default), "max") is None
    got = {
        i.job_id: i.max_attempts for i in [await q.jobs.get(other), await q.jobs.get(default)] if i
    }
    assert got == {other: DEFAULT_MAX_ATTEMPTS + 1, default: DEFAULT_MAX_ATTEMPTS}


@pytest.mark.parametrize("how", ["fail", "stall"])
async def test_a_row_without_max_gets_the_default_deliveries_then_goes_dead(
    q: echomq.Queue, how: str
) -> None:
    # The scripts read a missing `max` as DEFAULT_MAX_ATTEMPTS: not 1 (dead at the first
    # failure), not unlimited. Both paths that count deliveries: fail and the reaper's stall.
    jid = await q.lanes.enqueue("PLR_x", GUESS)
    assert await q.conn.hget(q.keys.job(jid), "max") is None
    for delivery in range(1, DEFAULT_MAX_ATTEMPTS + 1):
        c = await q.lanes.claim("w", 1 if how == "stall" else LEASE)
        assert c is not None and c.job_id == jid, delivery
        if how == "fail":
            await q.jobs.fail(jid, c.token, "boom", retry_in_ms=0)
        else:
            await asyncio.sleep(0.01)  # the 1 ms lease has run out on the server clock
            assert await q.stalled.reap() == [jid]
        info = await q.jobs.get(jid)
        assert info is not None
        assert info.state == (
            "dead"
            if delivery == DEFAULT_MAX_ATTEMPTS
            else "scheduled"
            if how == "fail"
            else "pending"
        ), delivery


@pytest.mark.parametrize("source", ["lanes", "jobs"])
async def test_a_row_written_before_the_body_field_is_claimed_with_its_payload(
    q: echomq.Queue, source: str
) -> None:
    # Rows in flight across the upgrade that renamed `payload` to `body` keep their payload.
    if source == "lanes":
        jid = await q.lanes.enqueue("PLR_x", GUESS)
    else:
        jid = await q.jobs.enqueue(GUESS)
    jk = q.keys.job(jid)
    body = await q.conn.hget(jk, "body")
    await q.conn.hdel(jk, "body")
    await q.conn.hset(jk, "payload", body)
    info = await q.jobs.get(jid)
    assert info is not None and info.payload == GUESS
    side = q.lanes if source == "lanes" else q.jobs
    c = await side.claim("w", LEASE)
    assert c is not None and c.job_id == jid and c.payload == GUESS
    assert await q.jobs.complete(jid, c.token)


async def test_the_embedded_server_keeps_a_guess_row_a_listpack(q: echomq.Queue) -> None:
    # The session's server is an EmbeddedValkey, with EchoMQ's config (echomq.server).
    assert len(dumps(GUESS)) > 64  # past Valkey's default hash-max-listpack-value
    jid = (await q.lanes.submit("PLR_x", GUESS, seq_scope="RND_y")).job_id
    assert await q.conn.object("encoding", q.keys.job(jid)) == b"listpack"
    c = await q.lanes.claim("w", LEASE)
    assert c is not None
    assert await q.jobs.complete(jid, c.token, {**GUESS, "exact": 2, "near": 1}) is True
    assert await q.conn.object("encoding", q.keys.job(jid)) == b"listpack"


async def test_a_completed_row_keeps_no_lease_and_its_lapsed_holder_reaps_nothing(
    q: echomq.Queue,
) -> None:
    # complete blanks the lease's `worker` and `lease` in its one HSET (no HDEL): every
    # reader takes '' as none, so a completed job names no holder and no deadline, and a
    # reap of its holder's lapse leaves it alone.
    jid = await q.lanes.enqueue("a", 1)
    await q.heartbeat("w", 1_000)
    c = await q.lanes.claim("w", LEASE)
    assert c is not None and c.job_id == jid
    held = await q.jobs.get(jid)
    assert held is not None and held.worker_id == "w" and held.lease_until_ms is not None
    assert await q.jobs.complete(jid, c.token, {"ok": 1}) is True
    row = await q.conn.hgetall(q.keys.job(jid))
    assert (row[b"state"], row.get(b"worker", b""), row.get(b"lease", b"")) == (
        b"completed",
        b"",
        b"",
    )
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "completed" and info.result == {"ok": 1}
    assert info.worker_id is None and info.lease_until_ms is None
    assert info.finished_at_ms is not None
    # the same completion again: still counted once, the row as it was
    assert await q.jobs.complete(jid, c.token, {"ok": 1}) is True
    assert await q.conn.hgetall(q.keys.job(jid)) == row
    # its holder lapses: the reaper finds nothing of its to stall
    await q.conn.zadd(q.keys.workers, {"w": 1})
    assert await q.stalled.reap() == []
    assert await q.conn.hgetall(q.keys.job(jid)) == row
    s = await q.stats()
    assert (s["counters"]["completed"], s["counters"].get("reaped", 0)) == (1, 0)
    assert [e["type"] for e in await _events(q)] == ["completed"]
