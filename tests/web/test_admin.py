"""The admin API against a real uvicorn: workers (a real one killed), the queue, dead jobs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import Any

import pytest
import redis.asyncio

import echomq
import echomq.ids
from codemojex import control, keys
from echomq.server import EmbeddedValkey
from tests.web.conftest import ADMIN_TOKEN, Served, WorkerProcess, assert_error, bearer

ADMIN = bearer(ADMIN_TOKEN)


async def test_every_admin_route_wants_the_admin_token(served: Served) -> None:
    player = await served.new_player()
    for method, path in (
        ("GET", "/api/admin/workers"),
        ("POST", "/api/admin/workers"),
        ("POST", "/api/admin/workers/WRK_x/kill"),
        ("GET", "/api/admin/queue"),
        ("GET", "/api/admin/dead"),
        ("POST", "/api/admin/dead/JOB_x/retry"),
        ("DELETE", "/api/admin/dead/JOB_x"),
    ):
        for headers in ({}, bearer(player["token"])):
            assert_error(
                await served.http.request(method, path, headers=headers), 401, "unauthorized"
            )


async def test_queue_view(served: Served) -> None:
    resp = await served.http.get("/api/admin/queue", headers=ADMIN)
    assert resp.status_code == 200
    body = resp.json()
    assert {"pending", "active", "scheduled", "completed", "dead", "lanes", "counters"} <= set(body)
    assert isinstance(body["lanes"], list)
    assert {"accepted", "scored", "stale_refused", "reclaimed"} <= set(body["counters"])


async def test_a_kill_order_sigkills_the_worker_process(
    served: Served, worker: WorkerProcess
) -> None:
    listed = (await served.http.get("/api/admin/workers", headers=ADMIN)).json()["workers"]
    mine = next(w for w in listed if w["worker_id"] == worker.worker_id)
    assert mine["alive"] and mine["pid"] == worker.proc.pid and mine["state"] == "idle"
    assert set(mine) >= {
        "worker_id",
        "pid",
        "host",
        "state",
        "job_id",
        "lease_remaining_ms",
        "jobs_done",
        "alive",
        "exit_reason",
    }
    resp = await served.http.post(f"/api/admin/workers/{worker.worker_id}/kill", headers=ADMIN)
    assert resp.status_code == 202 and resp.json()["worker_id"] == worker.worker_id
    async with asyncio.timeout(5):
        while worker.proc.poll() is None:
            await asyncio.sleep(0.02)
    assert worker.proc.returncode == -signal.SIGKILL


async def test_killing_an_unknown_or_dead_worker(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    resp = await served.http.post(
        "/api/admin/workers/WRK_01ARZ3NDEKTSV4RRFFQ69G5FAV/kill", headers=ADMIN
    )
    assert_error(resp, 404, "not_found")
    gone = echomq.ids.worker_id()
    await control.remember_worker(valkey, gone)
    await control.record_exit(valkey, gone, "killed", 12345)  # what a supervisor records
    assert_error(
        await served.http.post(f"/api/admin/workers/{gone}/kill", headers=ADMIN), 409, "conflict"
    )


async def test_adding_a_worker_needs_a_supervisor(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    assert_error(await served.http.post("/api/admin/workers", headers=ADMIN), 409, "conflict")
    await control.beat_supervisor(valkey, "SUP_test", os.getpid(), socket.gethostname())
    try:
        resp = await served.http.post("/api/admin/workers", headers=ADMIN)
        assert resp.status_code == 201
        worker_id = resp.json()["worker_id"]
        assert await valkey.lrange(keys.spawn_key("SUP_test"), 0, -1) == [worker_id.encode()]
    finally:
        await valkey.hdel(keys.SUPERVISORS, "SUP_test")


async def _dead_job(valkey: redis.asyncio.Redis, round_id: str) -> str:
    """A guess job that ran out of deliveries (no worker runs in this test)."""
    q = echomq.Queue(valkey, "guesses")
    lane = echomq.ids.branded("PLR")
    job_id = await q.lanes.enqueue(
        lane, {"player_id": lane, "round_id": round_id, "guess": ["🍎"] * 4}, max_attempts=1
    )
    claim = await q.lanes.claim("WRK_admin_test", 10_000)
    assert claim is not None and claim.job_id == job_id
    assert await q.jobs.fail(job_id, claim.token, "boom") == "dead"
    return job_id


async def test_dead_jobs_are_listed_retried_and_discarded(
    served: Served, valkey: redis.asyncio.Redis
) -> None:
    rnd = await served.current_round()
    retried, discarded = (
        await _dead_job(valkey, rnd["round_id"]),
        await _dead_job(valkey, rnd["round_id"]),
    )
    resp = await served.http.get("/api/admin/dead", headers=ADMIN)
    assert resp.status_code == 200
    jobs = {j["job_id"]: j for j in resp.json()["jobs"]}
    assert {retried, discarded} <= set(jobs)
    one: dict[str, Any] = jobs[retried]
    assert one["error"] == "boom" and one["payload"]["guess"] == ["🍎"] * 4  # operators see it
    assert one["attempts"] == 1

    resp = await served.http.post(f"/api/admin/dead/{retried}/retry", headers=ADMIN)
    assert resp.status_code == 202 and resp.json()["job_id"] == retried
    assert_error(
        await served.http.post(f"/api/admin/dead/{retried}/retry", headers=ADMIN), 409, "conflict"
    )
    resp = await served.http.delete(f"/api/admin/dead/{discarded}", headers=ADMIN)
    assert resp.status_code == 200
    assert_error(
        await served.http.delete(f"/api/admin/dead/{discarded}", headers=ADMIN), 404, "not_found"
    )
    left = {
        j["job_id"]
        for j in (await served.http.get("/api/admin/dead", headers=ADMIN)).json()["jobs"]
    }
    assert retried not in left and discarded not in left
    for bad in ("JOB_01ARZ3NDEKTSV4RRFFQ69G5FAV", "nope"):
        assert_error(
            await served.http.post(f"/api/admin/dead/{bad}/retry", headers=ADMIN), 404, "not_found"
        )
        assert_error(
            await served.http.delete(f"/api/admin/dead/{bad}", headers=ADMIN), 404, "not_found"
        )


async def test_the_oldest_dead_workers_are_forgotten_with_their_records(
    valkey: redis.asyncio.Redis, private_valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "KNOWN_KEEP", 3)
    sync = redis.Redis.from_url(private_valkey.url)
    ids = []
    for _ in range(5):
        wid = echomq.ids.worker_id()
        ids.append(wid)
        await control.remember_worker(valkey, wid)
        await control.record_exit(valkey, wid, "killed (SIGKILL)", 1)
        await asyncio.to_thread(control.record_killed_sync, sync, wid, ["JOB_x"])
        await asyncio.sleep(0.002)  # distinct first-seen stamps, so the order is by age
    await control.remember_worker(valkey, ids[-1])  # trimming runs on every registration
    kept = {x.decode() for x in await valkey.zrange(keys.KNOWN, 0, -1)}
    assert kept == set(ids[-3:])
    assert set(await control.exits(valkey)) == kept
    assert set(await control.killed(valkey)) == kept
    sync.close()
