from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import echomq

# The contract suites that run twice, on one node and on the session's 3-master cluster
# (as SAQ runs its suite once per backend). A test that reaches the single server itself
# (``valkey_url``, ``valkey_server``: spawned processes, restarts) runs on one node only.
VALKEY_BACKENDS = ("single", "cluster")
PER_BACKEND = {
    "tests.echomq.test_transitions",
    "tests.echomq.test_consumer",
    "tests.echomq.test_admission",
    "tests.echomq.test_fair_order",
    "tests.echomq.test_faults",
    "tests.echomq.test_reaper_lock",
    "tests.echomq.test_schedules",
}
_SINGLE_ONLY = {"valkey_url", "valkey_server"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = set(metafunc.fixturenames)
    if (
        metafunc.module.__name__ in PER_BACKEND
        and "valkey_backend" in names
        and not names & _SINGLE_ONLY
    ):
        metafunc.parametrize("valkey_backend", VALKEY_BACKENDS, indirect=True)


@pytest.fixture
async def q(redis_conn: Any, queue_name: str) -> AsyncIterator[echomq.Queue]:
    yield echomq.Queue(redis_conn, queue_name)


async def locations(q: echomq.Queue, job_id: str) -> list[str]:
    """Every location under emq:{q}: that holds ``job_id`` (must always be exactly one)."""
    k = q.keys
    found = []
    for name, key in (
        ("pending", k.pending),
        ("active", k.active),
        ("scheduled", k.scheduled),
        ("completed", k.completed),
        ("dead", k.dead),
        ("cancelled", k.cancelled),
    ):
        if await q.conn.zscore(key, job_id) is not None:
            found.append(name)
    # the non-empty lanes: activated ones in ``new``, the rest in the ring
    for lane in [*await q.conn.lrange(k.new, 0, -1), *await q.conn.lrange(k.ring, 0, -1)]:
        lane = lane.decode() if isinstance(lane, bytes) else lane
        if await q.conn.zscore(k.lane(lane), job_id) is not None:
            found.append(f"lane:{lane}")
    return found


async def snapshot(q: echomq.Queue) -> dict[str, Any]:
    """Every key of the queue with its full value, to prove a call changed nothing."""
    out: dict[str, Any] = {}
    async for key in q.conn.scan_iter(match=f"{q.keys.prefix}*"):
        key = key.decode()
        kind = (await q.conn.type(key)).decode()
        if kind == "hash":
            out[key] = await q.conn.hgetall(key)
        elif kind == "zset":
            out[key] = await q.conn.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            out[key] = await q.conn.lrange(key, 0, -1)
        elif kind == "set":
            out[key] = await q.conn.smembers(key)
        elif kind == "stream":
            out[key] = await q.conn.xrange(key)
        else:
            out[key] = await q.conn.get(key)
    return out
