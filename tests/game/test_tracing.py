"""One trace per guess, in one process with the SDK's in-memory exporter: the switch, the
spans and their links, and nothing stored or wrapped when tracing is off. The same chain
across real web and worker processes: tests/cli/test_tracing.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from codemojex import tracing
from codemojex.game import Game
from codemojex.score_worker import ScoreWorker
from tests.game.test_exactly_once import consume_until_completed, new_players

LEASE_MS = 10_000
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


@pytest.fixture
def off() -> Iterator[None]:
    tracing.use(None)
    yield


@pytest.mark.parametrize(
    ("env", "exporters"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "x"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, []),
    ],
)
def test_tracing_is_on_only_when_otel_variables_ask(
    env: dict[str, str], exporters: list[str]
) -> None:
    assert tracing.requested(env) == exporters


async def _score_all(game: Game, jobs: list[str], worker_id: str, *, traced: bool) -> None:
    scorer = ScoreWorker(game.engine, game.rounds, worker_id)
    handler = tracing.traced(scorer.handle, worker_id=worker_id, lease_ms=LEASE_MS)
    assert (handler == scorer.handle) is not traced  # off: the handler itself
    tracing.trace_completions(game.queue)
    try:
        await consume_until_completed(game, handler, jobs, worker_id, concurrency=8)
    finally:
        await scorer.close()


async def test_tracing_off_stores_no_header_and_wraps_nothing(game: Game, off: None) -> None:
    [pid] = await new_players(game, 1)
    rnd, _ = await game.current_round()
    real = game.queue.jobs.complete_encoded
    acc = await game.submit(pid, rnd.round_id, list(rnd.secret))
    assert not await game.conn.hexists(game.queue.keys.job(acc.job_id), "headers")
    assert tracing.enqueueing("lane", pid, rnd.round_id).headers is None
    await _score_all(game, [acc.job_id], "WRK_off", traced=False)
    assert game.queue.jobs.complete_encoded == real  # not wrapped
    info = await game.queue.jobs.get(acc.job_id)
    assert info is not None and info.headers == {}
    assert "traceparent" not in info.result  # nothing for the hub to follow


def _one(spans: list[ReadableSpan], name: str, job_id: str | None = None) -> ReadableSpan:
    found = [
        s
        for s in spans
        if s.name == name and (job_id is None or (s.attributes or {}).get("job_id") == job_id)
    ]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def test_a_guess_is_one_trace_from_enqueue_to_completion(
    game: Game, spans: InMemorySpanExporter
) -> None:
    players = await new_players(game, 3)
    rnd, _ = await game.current_round()
    jobs = [(await game.submit(p, rnd.round_id, list(rnd.secret))).job_id for p in players]
    for jid in jobs:  # the producer's context rides in the job's headers
        info = await game.queue.jobs.get(jid)
        assert info is not None and set(info.headers) >= {"traceparent"}
    await _score_all(game, jobs, "WRK_on", traced=True)
    done = spans.get_finished_spans()
    traces = set()
    for jid, pid in zip(jobs, players, strict=True):
        enqueue = _one(done, "echomq.enqueue", jid)
        claim = _one(done, "echomq.claim", jid)
        wait = _one(done, "queue.wait", jid)
        complete = _one(done, "echomq.complete", jid)
        assert enqueue.kind is SpanKind.PRODUCER and claim.kind is SpanKind.CONSUMER
        tid = enqueue.context.trace_id
        traces.add(tid)
        for child in (claim, wait):  # children of the propagated producer context
            assert child.context.trace_id == tid
            assert child.parent is not None and child.parent.span_id == enqueue.context.span_id
        assert complete.parent is not None and complete.parent.span_id == claim.context.span_id
        kids = {s.name for s in done if s.parent and s.parent.span_id == claim.context.span_id}
        assert kids == {"score", "sql.commit", "echomq.complete"}
        attrs = claim.attributes or {}
        assert attrs["player_id"] == pid and attrs["round_id"] == rnd.round_id
        assert attrs["worker_id"] == "WRK_on" and attrs["lane"] == pid
        assert attrs["attempts"] == 1
        assert (complete.attributes or {})["echomq.completed"] is True
        assert wait.start_time is not None and wait.end_time is not None
        assert wait.end_time >= wait.start_time
        # the completion event carries the consumer span on to the web process's hub
        info = await game.queue.jobs.get(jid)
        assert info is not None
        assert info.result["traceparent"].split("-")[2] == format(claim.context.span_id, "016x")
    assert len(traces) == len(jobs)  # one trace per guess


def test_without_opentelemetry_installed_tracing_stays_off(tmp_path: Path) -> None:
    """The SDK is an extra: asked for (OTEL_*) but not installed, a warning, no trace,
    and every module that hooks tracing still imports and runs its off path."""
    code = """
import logging, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
logging.basicConfig(level=logging.WARNING)
import codemojex.worker, web.app
from codemojex import tracing
assert tracing.configure("codemojex-test") is False
assert tracing.enqueueing("lane", "p", "r").headers is None
with tracing.span("score"):
    pass
print("ok")
"""
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    env.pop("OTEL_SDK_DISABLED", None)
    env.pop("OTEL_TRACES_EXPORTER", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "OpenTelemetry is not installed" in done.stderr
