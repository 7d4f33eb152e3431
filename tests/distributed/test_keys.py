"""Why EchoMQ's scripts may build keys from the ``KEYS[1]`` prefix on a Valkey Cluster.

Valkey documents keys a script did not declare as undefined on a cluster. EchoMQ's scripts
declare in ``KEYS`` the queue prefix ``emq:{q}:``, the call's own keys and every static key
of the queue they touch (``echomq.keys.SCRIPT_KEYS``), and build from the prefix only the
keys named by data they read: a job row per claimed id, a lane per lane name, a worker's
job set per lapsed worker, which no caller could list in advance. That is safe because of
what these tests pin on a real 3-master cluster:

* every key a queue ever writes carries its hash tag, so all of them are in the prefix's
  slot, on the one node that owns it (``test_every_key_a_queue_writes_is_in_its_slot``);
* a client routes each script by ``KEYS[1]``, so it runs on that node, and Valkey 8.1
  runs undeclared keys of the declared slot there (``..._runs_undeclared_keys_of_its_slot``);
* a key of another node is refused outright; a key of another slot on the same node is
  not refused for a script without flags (``#!lua`` would refuse it), which is exactly
  why no key may be built without the prefix: the server would not catch it.

What the prefix alone would not cover: a live resharding of the queue's slot. While the
slot migrates, the source node would redirect a script (its declared prefix is never a key
that exists) to the target, where undeclared keys may not have arrived yet; every script
also declares the never-written fence key, so a split slot answers TRYAGAIN instead
(tests/distributed/test_resharding.py, docs/reliability.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.cluster import key_slot
from redis.exceptions import ResponseError

import echomq
from echomq.keys import Keys
from harness.cluster import ValkeyCluster

LEASE = 60_000
_SET_GET = "redis.call('SET', ARGV[1], '1') return redis.call('GET', ARGV[1])"


def _key_in(cluster: ValkeyCluster, *, node: int, not_slot: int) -> str:
    """A key served by ``node`` in a slot other than ``not_slot``."""
    for i in range(100_000):
        key = f"probe{i}"
        if key_slot(key.encode()) != not_slot and cluster.master_of(key) == node:
            return key
    raise LookupError("no such key")


def test_every_key_name_carries_the_queue_hash_tag() -> None:
    k = Keys("guesses")
    names = [getattr(k, a) for a in dir(Keys) if isinstance(getattr(Keys, a), property)]
    names += [k.job("JOB_1"), k.lane("l"), k.worker("w"), k.worker_jobs("w"), k.seq("l", "s")]
    names += [k.dedup("d"), k.rate("r")]
    slot = key_slot(k.prefix.encode())
    assert all(n.startswith("emq:{guesses}:") for n in names)
    assert {key_slot(n.encode()) for n in names} == {slot}


async def test_every_key_a_queue_writes_is_in_its_slot(valkey_cluster: ValkeyCluster) -> None:
    """Every script, on the cluster: each key left behind is in the prefix's slot, on the
    node that owns it; no other master holds any key of the queue."""
    conn = valkey_cluster.client()
    q = echomq.Queue(conn, "keys-probe", echomq.Settings())
    try:
        await q.heartbeat("w1", 60_000, {"pid": 1})
        await q.heartbeat("w2", 1)  # lapses at once: the reaper takes its jobs back
        ids = [await q.jobs.enqueue(i) for i in range(3)]
        await q.jobs.enqueue("later", delay_ms=60_000)
        for lane in ("a", "b"):
            await q.lanes.submit(
                lane,
                lane,
                seq_scope="r",
                max_pending=10,
                dedup=(f"d{lane}", "fp", 60_000),
                rate_subject=lane,
                rate_per_s=5,
                rate_burst=5,
            )
        c1 = await q.jobs.claim("w1", LEASE)
        c2 = await q.jobs.claim("w2", LEASE)
        c3 = await q.jobs.claim("w1", LEASE)
        assert c1 and c2 and c3
        assert await q.jobs.extend(c1.job_id, c1.token, LEASE)
        assert await q.jobs.complete(c1.job_id, c1.token, {"ok": 1})
        assert await q.jobs.release(c3.job_id, c3.token)
        await asyncio.sleep(0.01)
        assert c2.job_id in await q.stalled.reap()
        lc = await q.lanes.claim("w1", LEASE)
        assert lc is not None
        assert await q.jobs.fail(lc.job_id, lc.token, "boom", retry_in_ms=0) == "scheduled"
        await q.promote()
        single = echomq.Queue(conn, q.name)
        dead = await single.jobs.enqueue("poison", max_attempts=1)
        while (c := await q.jobs.claim("w1", LEASE)) is not None:
            if c.job_id == dead:
                assert await q.jobs.fail(c.job_id, c.token, "no") == "dead"
        await q.jobs.retry_dead(dead)
        await q.stats()
        await q.unregister("w1")
        assert ids
    finally:
        await conn.aclose()

    prefix = q.keys.prefix
    owner = valkey_cluster.master_of(prefix)
    slot = key_slot(prefix.encode())
    found: dict[int, list[bytes]] = {}
    for port in valkey_cluster.ports[: valkey_cluster.masters_count]:
        with valkey_cluster.admin(port) as admin:
            found[port] = list(admin.scan_iter(match="emq:{keys-probe}*", count=1000))
    assert len(found[owner]) > 10  # rows, lanes, sets, counters, events, dedup, rate …
    assert {key_slot(k) for k in found[owner]} == {slot}
    assert all(not keys for port, keys in found.items() if port != owner)


def test_a_script_runs_undeclared_keys_of_its_slot(valkey_cluster: ValkeyCluster) -> None:
    """The premise: routed by its declared prefix, a script reads and writes keys of the
    same slot that it never declared (Valkey 8.1; a change here fails this test)."""
    prefix = "emq:{undeclared}:"
    owner = valkey_cluster.master_of(prefix)
    with valkey_cluster.admin(owner) as admin:
        assert admin.eval(_SET_GET, 1, prefix, prefix + "job:x") == b"1"
        assert admin.exists(prefix + "job:x") == 1
        admin.delete(prefix + "job:x")


def test_a_key_outside_the_slot_is_refused_on_another_node_and_not_on_the_same_one(
    valkey_cluster: ValkeyCluster,
) -> None:
    prefix = "emq:{undeclared}:"
    slot = key_slot(prefix.encode())
    owner = valkey_cluster.master_of(prefix)
    other = next(p for p in valkey_cluster.ports[:3] if p != owner)
    elsewhere = _key_in(valkey_cluster, node=other, not_slot=slot)
    next_door = _key_in(valkey_cluster, node=owner, not_slot=slot)
    with valkey_cluster.admin(owner) as admin:
        with pytest.raises(ResponseError, match="non local key"):
            admin.eval(_SET_GET, 1, prefix, elsewhere)
        # Not caught by the server without flags: hence every key carries the tag.
        assert admin.eval(_SET_GET, 1, prefix, next_door) == b"1"
        admin.delete(next_door)
        with pytest.raises(ResponseError, match="same slot"):
            admin.eval("#!lua\n" + _SET_GET, 1, prefix, next_door)
    with valkey_cluster.admin(other) as admin:
        moved: Any = None
        try:
            admin.eval(_SET_GET, 1, prefix, prefix + "job:y")
        except ResponseError as e:  # redis-py's plain client surfaces MOVED as an error
            moved = e
        assert moved is not None and str(owner) in str(moved)
