"""Scenario 6: a job that SIGKILLs whichever worker runs it is delivered exactly
``max_attempts`` times, then dead-lettered; meanwhile no other lane waits longer than L + R."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio

import echomq
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.harness import Figures, Pool, Zygote

pytestmark = pytest.mark.chaos

MAX_ATTEMPTS = 5
LANES = 10


async def test_poison_job_is_dead_lettered_and_starves_no_one(
    valkey: EmbeddedValkey,
    zygote: Zygote,
    tmp_path: Path,
    pools: list[Pool],
    figures: Figures,
) -> None:
    lease, lapse, reap = harness.LEASE_MS, harness.LAPSE_MS, harness.REAP_MS
    conn = redis.asyncio.Redis.from_url(valkey.url)
    q = echomq.Queue(conn, "poison")
    note = tmp_path / "notes.log"
    pool = Pool(
        zygote,
        tmp_path / "c",
        role="consumer",
        prefix="C",
        args={
            "url": valkey.url,
            "queue": q.name,
            "note": str(note),
            "mode": "work",
            "lease_ms": lease,
            "lapse_ms": lapse,
            "reap_interval_ms": reap,
            "concurrency": 2,
            "work_ms": 50,
        },
    )
    pools.append(pool)
    workers = [pool.spawn() for _ in range(4)]

    async def all_ready() -> bool:
        return all([await harness.registered(q, w.worker_id) for w in workers])

    await harness.wait_until(all_ready, 10, "workers ready")

    innocents: list[str] = []
    stop = asyncio.Event()

    async def trickle() -> None:
        # Bursts, so that workers claim several jobs at once and the poison shares its
        # worker with innocent jobs, which the kills then catch.
        rng = random.Random()
        while not stop.is_set():
            for _ in range(rng.randint(4, 16)):
                innocents.append(await q.lanes.enqueue(f"lane{rng.randrange(LANES)}", {}))
            await asyncio.sleep(rng.uniform(0.1, 0.3))

    producer = asyncio.create_task(trickle())
    await asyncio.sleep(0.3)
    poison = await q.lanes.enqueue("poison", {"poison": True}, max_attempts=MAX_ATTEMPTS)
    t0 = time.monotonic()
    try:
        while True:
            for _ in pool.poll():
                pool.spawn()  # a supervisor's job: replace the dead worker at once
            info = await q.jobs.get(poison)
            if info is not None and info.state == "dead":
                break
            assert time.monotonic() - t0 < 60, "the poison job was never dead-lettered"
            await asyncio.sleep(0.02)
        dead_after_s = time.monotonic() - t0
        await asyncio.sleep(1.0)  # the field keeps flowing after the death
    finally:
        stop.set()
        await producer

    async def all_done() -> bool:
        infos = [await q.jobs.get(j) for j in innocents]
        for _ in pool.poll():
            pool.spawn()
        return all(i is not None and i.state == "completed" for i in infos)

    await harness.wait_until(all_done, 30, "every other job completed")
    await pool.stop_all()
    lines = note.read_text().splitlines()
    deliveries = [ln for ln in lines if ln.startswith(f"poison {poison} ")]
    # The delivery of each innocent job that completed it: its wait from enqueue to claim.
    last_claim: dict[str, tuple[int, int, int]] = {}
    for ln in lines:
        parts = ln.split()
        if parts[0] == "claim":
            jid, token, claimed_at, enq = parts[1], int(parts[2]), int(parts[3]), int(parts[4])
            if jid not in last_claim or token > last_claim[jid][0]:
                last_claim[jid] = (token, claimed_at, enq)
    waits = [claimed - enq for _, claimed, enq in last_claim.values()]
    stranded = sum(1 for token, _, _ in last_claim.values() if token > 1)
    info = await q.jobs.get(poison)
    every = await q.events.since("0-0", count=100_000)
    events = [e for e in every if e.job_id == poison]
    why = Counter(e.fields.get("why") for e in every if e.type == "reaped")
    reaps = Counter(e.job_id for e in every if e.type == "reaped" and e.job_id != poison)
    await conn.aclose()
    figures.record(
        "6 poison job",
        max_attempts=MAX_ATTEMPTS,
        deliveries=len(deliveries),
        worker_deaths=pool.self_died,
        dead_after_s=round(dead_after_s, 1),
        reason=info.reason if info else None,
        other_jobs=len(innocents),
        other_jobs_caught_in_a_kill=stranded,
        other_max_reaps=max(reaps.values(), default=0),
        other_wait_ms=harness.summary([float(w) for w in waits]),
        bound_ms=lease + reap,
        reaped_because=dict(why),
    )
    assert info is not None and info.state == "dead"
    assert info.reason == "lease expired too often"
    # Delivered = run: exactly max_attempts times. (The token may be higher: a consumer
    # hands back, without spending a delivery, a redelivered job batched with another.)
    assert len(deliveries) == MAX_ATTEMPTS == info.stalls and info.attempts >= MAX_ATTEMPTS
    assert pool.self_died == MAX_ATTEMPTS
    assert [e.type for e in events] == ["reaped"] * MAX_ATTEMPTS + ["dead"]
    assert set(last_claim) == set(innocents)
    # Caught in a kill at most once: a redelivered job never travels with another.
    assert max(reaps.values(), default=0) <= 1, reaps.most_common(3)
    assert max(waits) <= lease + reap + harness.EPSILON_MS, sorted(waits)[-5:]
