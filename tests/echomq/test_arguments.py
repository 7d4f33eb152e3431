"""Every public call refuses a wrong argument before anything is sent (issue 11, item 2).

A Hypothesis property throws a wrong type, or a value out of range, at one argument of one
public call of ``Queue``, ``q.jobs``, ``q.lanes`` and ``q.stalled`` (the others valid) and
checks that it raises ``TypeError`` or ``ValueError`` and that nothing changed in Valkey:
the whole key space of the queue, read back before and after, is the same, so no job was
lost, moved or touched. ``attempts=1.0`` is the row that once made a claim batch vanish.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import echomq
from tests.echomq.conftest import snapshot

EXAMPLES = int(os.environ.get("CODEMOJEX_HYPOTHESIS_EXAMPLES", "60")) * 3

_NOT_INT = st.one_of(
    st.floats(allow_nan=False),
    st.just(1.0),
    st.text(max_size=3),
    st.booleans(),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.just(None),
)
_NOT_STR = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.binary(max_size=3),
    st.booleans(),
    st.lists(st.text(max_size=2), max_size=2),
    st.just(None),
)
_NOT_JSON = st.sampled_from([{1, 2}, frozenset(), object(), b"raw", {1: "a"}, complex(1, 2)])


def bad_values(kind: str) -> st.SearchStrategy[Any]:
    """Values an argument of ``kind`` must refuse. ``?`` marks an optional one (None is
    valid); ``>=n`` a lower bound."""
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    drop_none = (lambda v: v is not None) if optional else (lambda v: True)
    if base.startswith("int"):
        low = base.partition(">=")[2]
        # past what the scripts hold exactly (issue 21, item 4: attempts = 2^63 - 1)
        out = st.one_of(
            _NOT_INT.filter(drop_none), st.integers(min_value=echomq.checks.MAX_INT + 1)
        )
        return st.one_of(out, st.integers(max_value=int(low) - 1)) if low else out
    if base == "item token":  # in a batch, a token out of range is that item's stale verdict
        return _NOT_INT
    if base == "name":
        return st.one_of(_NOT_STR.filter(drop_none), st.just(""))
    if base == "text":
        return _NOT_STR
    if base == "json":
        return _NOT_JSON
    if base == "meta":
        return st.one_of(
            st.text(max_size=2),
            st.lists(st.integers(), max_size=2),
            st.integers(),
            st.just({1: "x"}),
            st.just({"": "x"}),
        )
    raise AssertionError(kind)


@dataclass(frozen=True)
class Call:
    name: str
    params: dict[str, tuple[str, Any]]  # name -> (kind, valid value)
    run: Callable[[echomq.Queue, dict[str, Any]], Awaitable[Any]]


def calls(job: str, token: int) -> list[Call]:
    """Every public call with valid arguments naming ``job`` (active under ``token``)."""
    return [
        Call(
            "jobs.enqueue",
            {
                "payload": ("json", {"p": 1}),
                "job_id": ("name?", None),
                "max_attempts": ("int>=1", 3),
                "delay_ms": ("int>=0", 0),
                "attempts": ("int>=0", 0),
            },
            lambda q, a: q.jobs.enqueue(a.pop("payload"), **a),
        ),
        Call(
            "jobs.claim",
            {"worker_id": ("name", "w"), "lease_ms": ("int>=1", 1000)},
            lambda q, a: q.jobs.claim(**a),
        ),
        Call(
            "jobs.claim_many",
            {"worker_id": ("name", "w"), "lease_ms": ("int>=1", 1000), "count": ("int>=1", 2)},
            lambda q, a: q.jobs.claim_many(**a),
        ),
        Call(
            "jobs.complete",
            {"job_id": ("name", job), "token": ("int", token), "result": ("json", {"r": 1})},
            lambda q, a: q.jobs.complete(**a),
        ),
        Call(
            "jobs.complete_many",
            {"job_id": ("name", job), "token": ("item token", token), "result": ("json", {"r": 1})},
            lambda q, a: q.jobs.complete_many([(a["job_id"], a["token"], a["result"])]),
        ),
        Call(
            "jobs.fail",
            {
                "job_id": ("name", job),
                "token": ("int", token),
                "error": ("text", "boom"),
                "retry_in_ms": ("int>=0?", None),
            },
            lambda q, a: q.jobs.fail(**a),
        ),
        Call(
            "jobs.extend",
            {"job_id": ("name", job), "token": ("int", token), "lease_ms": ("int>=1", 1000)},
            lambda q, a: q.jobs.extend(**a),
        ),
        Call(
            "jobs.extend_many",
            {"job_id": ("name", job), "token": ("item token", token), "lease_ms": ("int>=1", 1000)},
            lambda q, a: q.jobs.extend_many([(a["job_id"], a["token"])], a["lease_ms"]),
        ),
        Call(
            "jobs.release",
            {"job_id": ("name", job), "token": ("int", token), "worker_id": ("name?", None)},
            lambda q, a: q.jobs.release(**a),
        ),
        Call("jobs.get", {"job_id": ("name", job)}, lambda q, a: q.jobs.get(**a)),
        Call("jobs.retry_dead", {"job_id": ("name", job)}, lambda q, a: q.jobs.retry_dead(**a)),
        Call("jobs.discard", {"job_id": ("name", job)}, lambda q, a: q.jobs.discard(**a)),
        Call("jobs.dead", {"limit": ("int>=1", 10)}, lambda q, a: q.jobs.dead(**a)),
        Call(
            "lanes.enqueue",
            {
                "lane": ("name", "l"),
                "payload": ("json", {"p": 2}),
                "job_id": ("name?", None),
                "max_attempts": ("int>=1", 3),
            },
            lambda q, a: q.lanes.enqueue(a.pop("lane"), a.pop("payload"), **a),
        ),
        Call(
            "lanes.submit",
            {
                "lane": ("name", "l"),
                "payload": ("json", {"p": 3}),
                "job_id": ("name?", None),
                "max_attempts": ("int>=1", 3),
                "attempts": ("int>=0", 0),
                "max_pending": ("int>=0", 0),
                "deadline_ms": ("int>=0", 0),
            },
            lambda q, a: q.lanes.submit(a.pop("lane"), a.pop("payload"), **a),
        ),
        Call(
            "lanes.claim",
            {"worker_id": ("name", "w"), "lease_ms": ("int>=1", 1000)},
            lambda q, a: q.lanes.claim(**a),
        ),
        Call(
            "lanes.claim_many",
            {"worker_id": ("name", "w"), "lease_ms": ("int>=1", 1000), "count": ("int>=1", 2)},
            lambda q, a: q.lanes.claim_many(**a),
        ),
        Call("lanes.depth", {"lane": ("name", "l")}, lambda q, a: q.lanes.depth(**a)),
        Call("lanes.load", {"subject": ("name", "l")}, lambda q, a: q.lanes.load(**a)),
        Call(
            "lanes.unfinished",
            {"subject": ("name", "l"), "limit": ("int>=1", 10)},
            lambda q, a: q.lanes.unfinished(**a),
        ),
        Call(
            "heartbeat",
            {
                "worker_id": ("name", "w"),
                "lapse_ms": ("int>=1", 3000),
                "meta": ("meta", {"pid": 1}),
                "ttl_ms": ("int>=1", 60_000),
                "idle_lapse_ms": ("int>=3000?", None),
            },
            lambda q, a: q.heartbeat(**a),
        ),
        Call("unregister", {"worker_id": ("name", "w")}, lambda q, a: q.unregister(**a)),
        Call("stats", {"max_lanes": ("int>=0", 10)}, lambda q, a: q.stats(**a)),
        Call("promote", {"limit": ("int>=1", 10)}, lambda q, a: q.promote(**a)),
        Call("stalled.reap", {"limit": ("int>=1", 10)}, lambda q, a: q.stalled.reap(**a)),
        Call(
            "stalled.sweep",
            {
                "reaper_id": ("name", "w"),
                "lock_ms": ("int>=1", 1000),
                "horizon_ms": ("int>=0", 1000),
                "limit": ("int>=1", 10),
                "margin_ms": ("int>=0", 100),
            },
            lambda q, a: q.stalled.sweep(**a),
        ),
    ]


@st.composite
def wrong_calls(draw: st.DrawFn) -> tuple[int, str, Any]:
    """(call index, argument name, bad value)."""
    specs = calls("JOB_x", 1)
    i = draw(st.integers(0, len(specs) - 1))
    arg = draw(st.sampled_from(sorted(specs[i].params)))
    return i, arg, draw(bad_values(specs[i].params[arg][0]))


async def _setup(q: echomq.Queue) -> tuple[str, int]:
    await q.jobs.enqueue({"plain": 1})
    await q.lanes.enqueue("l", {"lane": 1})
    await q.jobs.enqueue({"later": 1}, delay_ms=3_600_000)
    held = await q.lanes.claim("w", 600_000)
    assert held is not None
    await q.heartbeat("w", 600_000)
    return held.job_id, held.token


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(wrong=wrong_calls())
@pytest.mark.slow
def test_a_wrong_argument_is_refused_and_changes_nothing(
    valkey_url: str,
    wrong: tuple[int, str, Any],
) -> None:
    asyncio.run(_refused(valkey_url, *wrong))


async def _refused(url: str, i: int, arg: str, bad: Any) -> None:
    conn = redis.asyncio.Redis.from_url(url, decode_responses=False)
    q = echomq.Queue(conn, f"args{uuid.uuid4().hex[:10]}")
    try:
        job, token = await _setup(q)
        call = calls(job, token)[i]
        args = {name: valid for name, (_, valid) in call.params.items()}
        args[arg] = bad
        before = await snapshot(q)
        with pytest.raises((TypeError, ValueError)):
            await call.run(q, args)
        assert await snapshot(q) == before, (call.name, arg, bad)
    finally:
        keys = [k async for k in conn.scan_iter(match=f"{q.keys.prefix}*")]
        if keys:
            await conn.unlink(*keys)
        await conn.aclose()


@pytest.mark.parametrize("name", [c.name for c in calls("JOB_x", 1)])
async def test_every_call_in_the_property_works_with_its_valid_arguments(
    q: echomq.Queue,
    name: str,
) -> None:
    """The property's baseline: with every argument valid, each call goes through (or
    fails on the job's state, not on an argument)."""
    job, token = await _setup(q)
    call = next(c for c in calls(job, token) if c.name == name)
    try:
        await call.run(q, {n: v for n, (_, v) in call.params.items()})
    except echomq.InvalidState:
        assert name in ("jobs.retry_dead", "jobs.discard")


def test_a_float_attempts_is_refused_before_it_reaches_a_row() -> None:
    """The reproduced case: jobs.enqueue(..., attempts=1.0) used to be stored as "1.0"."""

    async def go() -> None:
        q = echomq.Queue(None, "never-sent")
        with pytest.raises(TypeError, match="attempts must be an int"):
            await q.jobs.enqueue("x", attempts=1.0)  # type: ignore[arg-type]

    asyncio.run(go())


@pytest.mark.parametrize(
    "bad",
    [
        {"lease_ms": 1000.0},
        {"concurrency": "2"},
        {"batch": None},
        {"prefetch": 1.5},
        {"lapse_ms": True},
        {"heartbeat_ms": 0.5},
        {"park_max_ms": "5"},
        {"grace_ms": -1},
        {"worker_id": 7},
        {"worker_id": ""},
        {"reap_interval_ms": 0},
        {"concurrency": 0},
        {"source": "queue"},
    ],
)
def test_a_consumer_refuses_a_wrong_setting(bad: dict[str, Any]) -> None:
    q = echomq.Queue(None, "never-sent")
    with pytest.raises((TypeError, ValueError)):
        echomq.Consumer(q, lambda claim: asyncio.sleep(0), **bad)


def test_a_consumer_refuses_what_is_not_a_queue_or_a_handler() -> None:
    with pytest.raises(TypeError):
        echomq.Consumer("guesses", lambda claim: asyncio.sleep(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        echomq.Consumer(echomq.Queue(None, "q"), None)  # type: ignore[arg-type]
