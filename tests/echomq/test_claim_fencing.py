"""Claims against lost replies, rows and arguments out of range, and lost writes (issue 21,
items 3, 4 and 7). Each test failed before its fix, against the session's real Valkey.

* A claim whose reply is lost is re-sent by redis-py (10 times at most in 8.1, on a plain
  client as on a cluster one): the re-run used to lease a second batch, held by a live
  worker until its lease ran out, then reaped with a stall charged. A claim now carries
  a client-minted claim id, and its re-run answers the first run's batch.
* ``attempts`` of 2^63 - 1 made ``HINCRBY`` refuse half-way through a claim, the batch
  popped from its lanes and leased to no one; such values are now refused before anything
  is sent, and a row holding one is dead-lettered as malformed without harming the rest.
* After a lost claim (a crash with ``everysec``, an asynchronous failover) the next claim
  issued the same ``attempts`` again, and the old holder's completion was accepted; the
  token now also names its lease (the claim id), which the fenced calls check.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio
import redis.exceptions

import echomq
from echomq.scripts import SCRIPTS
from echomq.types import Token
from tests.echomq.conftest import locations, snapshot
from tests.echomq.reply_proxy import ReplyDropper

LEASE_MS = 60_000


async def _lanes_of_four(q: echomq.Queue) -> list[str]:
    return [await q.lanes.enqueue(f"l{i}", {"i": i}) for i in range(4)]


# -- item 3: a lost claim reply ----------------------------------------------------------


@pytest.mark.parametrize("source", ["lanes", "jobs"])
async def test_a_claim_whose_reply_is_lost_leases_only_what_the_caller_gets(
    valkey_url: str, queue_name: str, source: str
) -> None:
    parts = urlsplit(valkey_url)
    direct = redis.asyncio.Redis.from_url(valkey_url)
    proxy = await ReplyDropper(parts.hostname or "127.0.0.1", int(parts.port or 6379)).start()
    via = redis.asyncio.Redis(host="127.0.0.1", port=proxy.listen_port)  # redis-py's defaults
    try:
        q, qp = echomq.Queue(direct, queue_name), echomq.Queue(via, queue_name)
        if source == "lanes":
            ids = await _lanes_of_four(q)
        else:
            ids = [await q.jobs.enqueue({"i": i}) for i in range(4)]
        script = SCRIPTS["lane_claim" if source == "lanes" else "claim"]
        await direct.script_load(script.source)  # EVALSHA runs: no NOSCRIPT round
        proxy.arm.marker = script.sha.encode()

        side = qp.lanes if source == "lanes" else qp.jobs
        got = await side.claim_many("W", LEASE_MS, 2)

        assert proxy.arm.dropped == 1  # the first run's reply was lost, the call re-sent
        held = {echomq.codec.text(m) for m in await direct.smembers(q.keys.worker_jobs("W"))}
        assert len(got.claims) == 2
        assert held == {c.job_id for c in got.claims}  # before the fix: 4 held, 2 known
        assert await direct.zcard(q.keys.active) == 2
        assert (await q.stats())["counters"].get("replayed") == 1
        for c in got.claims:
            assert c.token == 1 and await q.jobs.complete(c.job_id, c.token)
        # Nothing else is leased, so nothing can be reaped and no stall is charged.
        assert await direct.zcard(q.keys.active) == 0
        assert await q.stalled.reap() == []
        for jid in ids:
            info = await q.jobs.get(jid)
            assert info is not None and info.stalls == 0
            assert info.state in ("completed", "pending")
            assert info.attempts == (1 if info.state == "completed" else 0)
    finally:
        await via.aclose()
        await proxy.stop()
        await direct.aclose()


async def test_a_claim_sent_again_with_its_claim_id_answers_the_same_batch(
    q: echomq.Queue,
) -> None:
    await _lanes_of_four(q)
    first = await q.lanes.claim_many("W", LEASE_MS, 2, claim_id="c1")
    again = await q.lanes.claim_many("W", LEASE_MS, 2, claim_id="c1")
    assert [(c.job_id, c.token, c.token.lease) for c in again.claims] == [
        (c.job_id, c.token, c.token.lease) for c in first.claims
    ]
    assert await q.conn.scard(q.keys.worker_jobs("W")) == 2
    # A job finished since is not replayed; another worker's call is a new call.
    assert await q.jobs.complete(first.claims[0].job_id, first.claims[0].token)
    assert [
        c.job_id for c in (await q.lanes.claim_many("W", LEASE_MS, 2, claim_id="c1")).claims
    ] == [first.claims[1].job_id]
    other = await q.lanes.claim_many("V", LEASE_MS, 2, claim_id="c2")
    assert {c.job_id for c in other.claims}.isdisjoint(c.job_id for c in first.claims)


# -- item 4: counts out of range ---------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.jobs.enqueue(1, attempts=2**63 - 1), ValueError),
        (lambda q: q.jobs.enqueue(1, attempts=2**53), ValueError),
        (lambda q: q.jobs.enqueue(1, max_attempts=2**63), ValueError),
        (lambda q: q.jobs.enqueue(1, delay_ms=2**62), ValueError),
        (lambda q: q.lanes.submit("l", 1, attempts=2**63 - 1), ValueError),
        (lambda q: q.lanes.submit(5, 1), TypeError),
        (lambda q: q.lanes.submit("l", 1, attempts=1.5), TypeError),
        (lambda q: q.lanes.submit("l", 1, max_attempts=2.5), TypeError),
        (lambda q: q.lanes.submit("l", 1, max_attempts=0), ValueError),
        (lambda q: q.lanes.submit("l", 1, job_id=7), TypeError),
        (lambda q: q.lanes.submit("l", 1, max_pending=2**63), ValueError),
        (lambda q: q.lanes.submit("l", 1, deadline_ms=2**63), ValueError),
        (lambda q: q.lanes.claim_many("w", 2**63, 1), ValueError),
        (lambda q: q.jobs.claim_many("w", 1000, 2**63), ValueError),
        (lambda q: q.jobs.complete("j", 2**63), ValueError),
        (lambda q: q.jobs.extend("j", 1, 2**63), ValueError),
        (lambda q: q.jobs.fail("j", 1, "e", retry_in_ms=2**63), ValueError),
    ],
)
async def test_counts_the_scripts_cannot_hold_are_refused_before_anything_is_sent(
    q: echomq.Queue, call: Any, error: type[Exception]
) -> None:
    await _lanes_of_four(q)
    await q.lanes.claim("w", LEASE_MS)
    before = await snapshot(q)
    with pytest.raises(error):
        await call(q)
    assert await snapshot(q) == before


@pytest.mark.parametrize("bad", [str(2**63 - 1), str(2**53 - 1), "99999999999999999999"])
async def test_a_row_whose_attempts_hincrby_would_refuse_does_not_break_the_claim_of_the_others(
    q: echomq.Queue, bad: str
) -> None:
    ids = await _lanes_of_four(q)
    await q.conn.hset(q.keys.job(ids[1]), "attempts", bad)  # bad data, written directly
    got = await q.lanes.claim_many("W", LEASE_MS, 4)
    assert [c.job_id for c in got.claims] == [ids[0], ids[2], ids[3]]
    assert all(c.token == 1 for c in got.claims)
    for jid in ids:
        assert len(await locations(q, jid)) == 1, jid  # each job in exactly one place
    info = await q.jobs.get(ids[1])
    assert info is not None and info.state == "dead" and info.reason == "malformed row"
    assert await q.conn.scard(q.keys.worker_jobs("W")) == 3
    assert await q.lanes.load("l1") == 0  # not counted open forever


async def test_a_claim_refused_by_a_foreign_key_changes_nothing(q: echomq.Queue) -> None:
    await _lanes_of_four(q)
    await q.conn.set(q.keys.worker_jobs("W"), "not a set")
    before = await snapshot(q)
    with pytest.raises(redis.exceptions.ResponseError, match="not a set"):
        await q.lanes.claim_many("W", LEASE_MS, 4)
    assert await snapshot(q) == before  # nothing popped, promoted or leased


# -- item 7: a token issued twice after data loss ------------------------------------------


async def _lose_writes(q: echomq.Queue, saved: dict[str, bytes]) -> None:
    """Put every key of the queue back as it was when ``saved`` was taken: what a crash
    with ``everysec``, or a failover to a replica that had not received them, does."""
    now = [k async for k in q.conn.scan_iter(match=f"{q.keys.prefix}*")]
    if now:
        await q.conn.delete(*now)
    for key, dumped in saved.items():
        await q.conn.restore(key, 0, dumped)


async def _save(q: echomq.Queue) -> dict[str, bytes]:
    keys = [k.decode() async for k in q.conn.scan_iter(match=f"{q.keys.prefix}*")]
    return {k: await q.conn.dump(k) for k in keys}


@pytest.mark.parametrize("call", ["complete", "fail", "extend", "release"])
async def test_after_a_lost_claim_the_old_holder_is_fenced_off_by_its_lease(
    q: echomq.Queue, call: str
) -> None:
    jid = await q.lanes.enqueue("l", {"x": 1})
    saved = await _save(q)
    a = await q.lanes.claim("A", LEASE_MS)
    assert a is not None
    await _lose_writes(q, saved)  # A's claim is lost with the server's last writes
    b = await q.lanes.claim("B", LEASE_MS)
    assert b is not None and b.job_id == a.job_id == jid
    assert b.token == a.token == 1  # the same attempts, issued twice
    assert isinstance(a.token, Token) and a.token.lease != b.token.lease

    if call == "complete":
        assert await q.jobs.complete(jid, a.token, {"by": "A"}) is False  # before: True
        assert await q.jobs.complete_many([(jid, a.token, None)]) == [False]
    elif call == "fail":
        assert await q.jobs.fail(jid, a.token, "A failed") == "stale"
    elif call == "extend":
        assert await q.jobs.extend(jid, a.token, LEASE_MS) is False
        assert await q.jobs.extend_many([(jid, a.token)], LEASE_MS) == [False]
    else:
        assert await q.jobs.release(jid, a.token) is False
    assert await q.jobs.extend(jid, b.token, LEASE_MS) is True
    assert await q.jobs.complete(jid, b.token, {"by": "B"}) is True
    info = await q.jobs.get(jid)
    assert info is not None and info.result == {"by": "B"}
    assert (await q.stats())["counters"]["completed"] == 1
    # The repeat of B's completion is still answered True; A's is still refused.
    assert await q.jobs.complete(jid, b.token, {"by": "B"}) is True
    assert await q.jobs.complete(jid, a.token, {"by": "A"}) is False


async def test_a_bare_int_token_is_checked_on_state_and_attempts(q: echomq.Queue) -> None:
    """The contract's token is the number: a caller that kept only ``int(claim.token)``
    still completes (without the lease check)."""
    await q.lanes.enqueue("l", 1)
    c = await q.lanes.claim("A", LEASE_MS)
    assert c is not None and c.token.attempts == 1
    assert await q.jobs.extend(c.job_id, int(c.token), LEASE_MS) is True
    assert await q.jobs.complete(c.job_id, 2) is False
    assert await q.jobs.complete(c.job_id, int(c.token)) is True


async def test_a_claim_whose_memo_key_holds_a_foreign_value_changes_nothing(
    q: echomq.Queue,
) -> None:
    await _lanes_of_four(q)
    await q.conn.rpush(q.keys.claim("c9"), "x")
    before = await snapshot(q)
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await q.lanes.claim_many("W", LEASE_MS, 4, claim_id="c9")
    assert await snapshot(q) == before


async def test_a_consumer_whose_claim_reply_is_lost_charges_no_stall(
    valkey_url: str, queue_name: str
) -> None:
    """End to end: a Consumer (concurrency 2, batch 2, lease 1 s, reaping every 100 ms)
    through the proxy, one claim reply dropped. Before the fix the re-run leased 2 more
    jobs the consumer never heard of; they waited out their lease and were reaped, a stall
    charged to each, and delivered again."""
    import asyncio

    parts = urlsplit(valkey_url)
    direct = redis.asyncio.Redis.from_url(valkey_url)
    proxy = await ReplyDropper(parts.hostname or "127.0.0.1", int(parts.port or 6379)).start()
    via = redis.asyncio.Redis(host="127.0.0.1", port=proxy.listen_port)
    done: list[str] = []

    async def handler(claim: echomq.Claim) -> None:
        done.append(claim.job_id)

    consumer = echomq.Consumer(
        echomq.Queue(via, queue_name),
        handler,
        lease_ms=1_000,
        concurrency=2,
        batch=2,
        lapse_ms=600,
        reap_interval_ms=100,
    )
    task = None
    try:
        q = echomq.Queue(direct, queue_name)
        await direct.script_load(SCRIPTS["lane_claim"].source)
        proxy.arm.marker = SCRIPTS["lane_claim"].sha.encode()
        ids = await _lanes_of_four(q)
        task = asyncio.create_task(consumer.run())
        for _ in range(100):
            if (await q.stats())["completed"] == 4:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # past every lease: a stranded job would be reaped now
        assert proxy.arm.dropped == 1
        stats = await q.stats()
        assert stats["completed"] == 4 and stats["active"] == 0
        assert stats["counters"].get("reaped", 0) == 0
        assert sorted(done) == sorted(ids)  # each delivered once
        for jid in ids:
            info = await q.jobs.get(jid)
            assert info is not None and info.stalls == 0 and info.attempts == 1
    finally:
        consumer.stop()
        if task is not None:
            await asyncio.wait_for(task, 10)
        await via.aclose()
        await proxy.stop()
        await direct.aclose()
