"""``echomq.metrics``: the collector's families from a real queue, on one Valkey and on the
session's cluster, and what it says when the queue cannot be read."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
import redis.asyncio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import echomq
import echomq.metrics
from echomq.metrics import QueueCollector
from harness.helpers import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(*collectors: QueueCollector) -> Samples:
    registry = CollectorRegistry(auto_describe=True)
    for c in collectors:
        registry.register(c)
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.mark.parametrize("valkey_backend", ["single", "cluster"], indirect=True)
async def test_a_scrape_reports_the_queues_numbers(q: echomq.Queue) -> None:
    for lane in ("alice", "alice", "bob"):
        await q.lanes.enqueue(lane, {"from": lane})
    await q.jobs.enqueue({"later": True}, delay_ms=60_000)
    done = await q.jobs.enqueue({"plain": True})
    claim = await q.jobs.claim("WRK_metrics", 10_000)
    assert claim is not None and claim.job_id == done
    assert await q.jobs.complete(done, claim.token, result=1)
    assert not await q.jobs.complete(done, claim.token - 1)  # stale: refused by fencing
    held = await q.lanes.claim("WRK_metrics", 10_000)
    assert held is not None
    await q.heartbeat("WRK_metrics", 3_000)

    collector = QueueCollector(q, lanes=5)
    before = scrape(collector)  # nothing read yet: down, and nothing else said
    assert value(before, "echomq_up", queue=q.name) == 0
    assert not [k for k in before if k[0] == "echomq_jobs"]

    await collector.refresh()
    s = scrape(collector)
    assert value(s, "echomq_up", queue=q.name) == 1
    jobs = {
        state: value(s, "echomq_jobs", queue=q.name, state=state) for state in echomq.metrics.STATES
    }
    assert jobs == {"pending": 2, "active": 1, "scheduled": 1, "completed": 1, "dead": 0}
    assert value(s, "echomq_lanes", queue=q.name) == 2
    depths = {
        lane: value(s, "echomq_lane_depth", queue=q.name, lane=lane) for lane in ("alice", "bob")
    }
    assert sum(depths.values()) == 2
    assert value(s, "echomq_workers_alive", queue=q.name) == 1
    moved = "echomq_transitions_total"
    assert value(s, moved, queue=q.name, transition="enqueued") == 5
    assert value(s, moved, queue=q.name, transition="completed") == 1
    assert value(s, "echomq_refused_total", queue=q.name, op="complete") == 1
    assert 0 <= value(s, "echomq_snapshot_age_seconds", queue=q.name) < 5
    assert value(s, "echomq_paused", queue=q.name) == 0
    await q.pause()
    await collector.refresh()
    assert value(scrape(collector), "echomq_paused", queue=q.name) == 1
    await q.resume()

    # A scrape only formats: what changed since shows at the next refresh.
    await q.jobs.enqueue({"more": True})
    assert value(scrape(collector), moved, queue=q.name, transition="enqueued") == 5
    await collector.refresh()
    assert value(scrape(collector), moved, queue=q.name, transition="enqueued") == 6


async def test_no_lane_is_listed_unless_asked(q: echomq.Queue) -> None:
    await q.lanes.enqueue("alice", {})
    collector = QueueCollector(q)
    await collector.refresh()
    s = scrape(collector)
    assert value(s, "echomq_lanes", queue=q.name) == 1
    assert not [k for k in s if k[0] == "echomq_lane_depth"]


async def test_one_collector_reports_several_queues_and_a_partitioned_one(
    redis_conn: Any, queue_name: str
) -> None:
    plain = echomq.Queue(redis_conn, queue_name)
    parts = echomq.Partitioned(redis_conn, f"{queue_name}p", 3)
    await plain.jobs.enqueue({})
    for i in range(12):
        await parts.enqueue(f"player{i}", {"n": i})
    await parts.partitions[0].heartbeat("WRK_p", 3_000)
    collector = QueueCollector(plain, parts)
    await collector.refresh()
    s = scrape(collector)
    assert value(s, "echomq_jobs", queue=plain.name, state="pending") == 1
    assert value(s, "echomq_jobs", queue=parts.name, state="pending") == 12  # summed
    assert value(s, "echomq_lanes", queue=parts.name) == 12
    assert value(s, "echomq_workers_alive", queue=parts.name) == 1
    assert value(s, "echomq_workers_alive", queue=plain.name) == 0
    snap = collector.snapshot(parts.name)
    assert snap is not None and "partitions" in snap.stats


async def test_a_queue_that_cannot_be_read_says_up_0_and_nothing_stale(
    q: echomq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = redis.asyncio.Redis(port=free_port(), socket_connect_timeout=1)
    lost = echomq.Queue(gone, "unreachable")
    collector = QueueCollector(q, lost)
    with pytest.raises(redis.exceptions.ConnectionError):
        await collector.refresh()  # the good queue is read all the same
    s = scrape(collector)
    assert value(s, "echomq_up", queue=q.name) == 1
    assert value(s, "echomq_up", queue="unreachable") == 0
    assert not [
        k for k in s if k[1] and dict(k[1]).get("queue") == "unreachable" and k[0] != "echomq_up"
    ]
    await gone.aclose()

    # A snapshot older than max_age_s is not reported either.
    aged = QueueCollector(q, max_age_s=0.5)
    await aged.refresh()
    assert aged.snapshot(q.name) is not None
    await asyncio.sleep(0.6)
    assert aged.snapshot(q.name) is None
    assert value(scrape(aged), "echomq_up", queue=q.name) == 0

    # A refresh cut short (a timeout around it) leaves the queue down, not half read.
    slow = QueueCollector(q)
    await slow.refresh()

    async def hang(*_: Any, **__: Any) -> Any:
        await asyncio.sleep(10)

    monkeypatch.setattr(echomq.Queue, "stats", hang)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await slow.refresh()
    assert value(scrape(slow), "echomq_up", queue=q.name) == 0
    monkeypatch.undo()


async def test_run_refreshes_in_the_background(q: echomq.Queue) -> None:
    collector = QueueCollector(q)
    task = asyncio.create_task(collector.run(every_s=0.05))
    try:
        for _ in range(100):
            if collector.snapshot(q.name) is not None:
                break
            await asyncio.sleep(0.02)
        first = collector.snapshot(q.name)
        assert first is not None
        await q.jobs.enqueue({})
        for _ in range(100):
            now = collector.snapshot(q.name)
            if now is not None and now.stats["pending"] == 1:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the background refresh never saw the new job")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_arguments_are_checked(q: echomq.Queue) -> None:
    with pytest.raises(TypeError):
        QueueCollector()
    with pytest.raises(TypeError):
        QueueCollector("guesses")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="share a name"):
        QueueCollector(q, echomq.Queue(q.conn, q.name))
    with pytest.raises(ValueError):
        QueueCollector(q, lanes=-1)
    with pytest.raises(TypeError):
        QueueCollector(q, lanes=True)
    with pytest.raises(ValueError):
        QueueCollector(q, max_age_s=0)
    with pytest.raises(TypeError):
        QueueCollector(q, max_age_s="60")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        QueueCollector(q, prefix="my-queue")
    with pytest.raises(TypeError):
        await echomq.metrics.read("guesses")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await echomq.metrics.read(q, lanes=-1)
    collector = QueueCollector(q, prefix="shop")
    with pytest.raises(ValueError):
        await collector.run(every_s=0)
    await collector.refresh()
    assert value(scrape(collector), "shop_up", queue=q.name) == 1


def test_echomq_imports_without_prometheus_client() -> None:
    script = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"  # as if it were not installed
        "import echomq, echomq.cli\n"
        "try:\n"
        "    import echomq.metrics\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'echomq[metrics]'" in done.stdout
