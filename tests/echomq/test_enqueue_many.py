"""``Jobs.enqueue_many``: N jobs in one script call, atomic, ids in order, with enqueue's
options. On one node and on Valkey Cluster."""

from __future__ import annotations

import pytest

import echomq
from echomq.jobs import ENQUEUE_CHUNK
from tests.echomq.conftest import locations

pytestmark = pytest.mark.parametrize("valkey_backend", ("single", "cluster"), indirect=True)

LEASE = 5_000


async def test_ids_come_back_in_order_and_claims_take_them_in_order(q: echomq.Queue) -> None:
    ids = await q.jobs.enqueue_many([{"n": i} for i in range(5)])
    assert len(ids) == 5 and ids == sorted(ids)
    batch = await q.jobs.claim_many("w", LEASE, 10)
    assert [c.job_id for c in batch.claims] == ids
    assert [c.payload for c in batch.claims] == [{"n": i} for i in range(5)]
    assert (await q.stats())["counters"]["enqueued"] == 5


async def test_options_apply_to_every_job(q: echomq.Queue) -> None:
    await q.jobs.enqueue("plain")
    high = await q.jobs.enqueue_many(["a", "b"], priority=5, headers={"k": "v"}, max_attempts=2)
    later = await q.jobs.enqueue_many(["c"], delay_ms=60_000)
    assert await locations(q, later[0]) == ["scheduled"]
    got = (await q.jobs.claim_many("w", LEASE, 10)).claims
    assert [c.job_id for c in got[:2]] == high and got[2].payload == "plain"
    assert dict(got[0].headers) == {"k": "v"}
    info = await q.jobs.get(high[0])
    assert info is not None and info.max_attempts == 2


async def test_an_existing_id_is_a_no_op_and_named_ids_are_kept(q: echomq.Queue) -> None:
    first = await q.jobs.enqueue("x", job_id="JOB_A")
    ids = await q.jobs.enqueue_many(["y", "z"], job_ids=[first, "JOB_B"])
    assert ids == ["JOB_A", "JOB_B"]
    assert (await q.stats())["counters"]["enqueued"] == 2
    assert (await q.jobs.get("JOB_A")).payload == "x"  # type: ignore[union-attr]


async def test_more_than_a_chunk_goes_in_several_calls(q: echomq.Queue) -> None:
    n = ENQUEUE_CHUNK + 3
    ids = await q.jobs.enqueue_many(list(range(n)))
    assert len(set(ids)) == n
    assert (await q.stats())["pending"] == n


async def test_nothing_is_sent_for_a_bad_argument(q: echomq.Queue) -> None:
    with pytest.raises(TypeError):
        await q.jobs.enqueue_many("abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await q.jobs.enqueue_many([object()])
    with pytest.raises(ValueError):
        await q.jobs.enqueue_many(["a"], job_ids=["x", "y"])
    with pytest.raises(ValueError):
        await q.jobs.enqueue_many(["a"], priority=2000)
    with pytest.raises(ValueError):
        await q.jobs.enqueue_many(["a"], delay_ms=5, run_at_ms=5)
    assert await q.jobs.enqueue_many([]) == []
    assert (await q.stats())["counters"].get("enqueued", 0) == 0
