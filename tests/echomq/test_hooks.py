"""The hooks (``echomq.hooks``) against the real server: each point is called when its
docstring says, in order, and a raising hook never loses a job or changes its fate."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest

import echomq
from echomq.hooks import Completion, Handler, Send
from echomq.types import FailOutcome
from tests.echomq.test_consumer import completed, running_consumers, wait_for

Start = Callable[..., Awaitable[echomq.Consumer]]


@pytest.fixture
async def start(q: echomq.Queue) -> AsyncIterator[Start]:
    async with running_consumers(q) as go:
        yield go


async def echo(claim: echomq.Claim) -> Any:
    return claim.payload


async def states(q: echomq.Queue, ids: Sequence[str]) -> list[str]:
    return [(i.state if (i := await q.jobs.get(j)) else "missing") for j in ids]


# -- around_handler ----------------------------------------------------------------------------


async def test_around_handler_hooks_nest_queue_first_and_their_result_is_completed(
    q: echomq.Queue, start: Start
) -> None:
    order: list[str] = []

    def around(name: str) -> echomq.Hooks:
        async def hook(claim: echomq.Claim, call_next: Handler) -> Any:
            order.append(f"{name}>")
            result = await call_next(claim)
            order.append(f"<{name}")
            return {name: result}

        return echomq.Hooks(around_handler=hook)

    q.add_hooks(around("queue"))
    jid = await q.lanes.enqueue("a", 7)
    await start(echo, hooks=[around("inner"), around("innermost")])
    await wait_for(lambda: completed(q, 1))
    assert order == ["queue>", "inner>", "innermost>", "<innermost", "<inner", "<queue"]
    info = await q.jobs.get(jid)
    assert info is not None and info.result == {"queue": {"inner": {"innermost": 7}}}


async def test_a_raising_around_handler_fails_the_job_which_is_retried_not_lost(
    q: echomq.Queue, start: Start
) -> None:
    raised: list[str] = []

    async def hook(claim: echomq.Claim, call_next: Handler) -> Any:
        if claim.token == 1:
            raised.append(claim.job_id)
            raise echomq.Retry(10, "the hook refuses the first delivery")
        return await call_next(claim)

    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(5)]
    await start(echo, hooks=[echomq.Hooks(around_handler=hook)], concurrency=3)
    await wait_for(lambda: completed(q, 5))
    assert sorted(raised) == sorted(ids)
    for jid in ids:
        info = await q.jobs.get(jid)
        assert info is not None and info.state == "completed" and info.attempts == 2
        assert info.error is not None and "the hook refuses" in info.error


# -- on_claim ----------------------------------------------------------------------------------


async def test_on_claim_sees_every_leased_job_before_its_handler_starts(
    q: echomq.Queue, start: Start
) -> None:
    claimed: list[str] = []
    started_before_claimed: list[str] = []

    def on_claim(claims: Sequence[echomq.Claim]) -> None:
        assert claims  # never called for an empty claim
        claimed.extend(c.job_id for c in claims)

    async def handler(claim: echomq.Claim) -> None:
        if claim.job_id not in claimed:
            started_before_claimed.append(claim.job_id)

    ids = [await q.lanes.enqueue(f"l{i % 4}", i) for i in range(40)]
    await start(handler, hooks=[echomq.Hooks(on_claim=on_claim)], concurrency=4, batch=8)
    await wait_for(lambda: completed(q, 40))
    assert sorted(claimed) == sorted(ids)  # each once
    assert started_before_claimed == []


async def test_a_raising_or_async_notification_changes_no_jobs_fate(
    q: echomq.Queue, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    awaited: list[int] = []

    def broken(claims: Sequence[echomq.Claim]) -> None:
        raise RuntimeError("a bug in a hook")

    async def slow(claims: Sequence[echomq.Claim]) -> None:
        await asyncio.sleep(0.001)
        awaited.append(len(claims))

    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(10)]
    with caplog.at_level(logging.WARNING, logger="echomq.hooks"):
        await start(
            echo, hooks=[echomq.Hooks(on_claim=broken), echomq.Hooks(on_claim=slow)], concurrency=2
        )
        await wait_for(lambda: completed(q, 10))
    assert await states(q, ids) == ["completed"] * 10
    assert sum(awaited) == 10  # the hook after the broken one still ran, and was awaited
    warned = [r for r in caplog.records if "on_claim raised RuntimeError" in r.getMessage()]
    assert len(warned) == 1  # once per kind, then at debug level


# -- around_complete ---------------------------------------------------------------------------


async def test_around_complete_wraps_each_batch_with_its_verdicts(
    q: echomq.Queue, start: Start
) -> None:
    seen: list[tuple[str, int, bool]] = []

    async def around(items: Sequence[Completion], send: Send) -> list[bool]:
        verdicts = await send(items)
        seen.extend((j, t, v) for (j, t, _), v in zip(items, verdicts, strict=True))
        return verdicts

    ids = [await q.lanes.enqueue(f"l{i % 5}", i) for i in range(30)]
    await start(echo, hooks=[echomq.Hooks(around_complete=around)], concurrency=6)
    await wait_for(lambda: completed(q, 30))
    await wait_for(lambda: _len_at_least(seen, 30))  # the server counts before the reply lands
    assert sorted(j for j, _, _ in seen) == sorted(ids)
    assert all(t == 1 and v is True for _, t, v in seen)


@pytest.mark.parametrize("when", ["before", "after", "bad verdicts", "never sends"])
async def test_a_broken_around_complete_is_passed_over_and_counts_nothing_twice(
    q: echomq.Queue, start: Start, when: str
) -> None:
    async def around(items: Sequence[Completion], send: Send) -> list[bool]:
        if when == "before":
            raise RuntimeError("broken before the send")
        if when == "never sends":
            return [True] * len(items)  # would leave the jobs active till their leases end
        verdicts = await send(items)
        if when == "after":
            raise RuntimeError("broken after the send")
        return verdicts[:-1]  # "bad verdicts": one short

    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(12)]
    c = await start(echo, hooks=[echomq.Hooks(around_complete=around)], concurrency=4)
    await wait_for(lambda: completed(q, 12))
    await wait_for(lambda: _done(c, 12))
    assert await states(q, ids) == ["completed"] * 12
    stats = await q.stats()
    assert stats["counters"]["completed"] == 12  # each counted once
    assert c.counts.completed == 12 and c.counts.stale == 0 and c.counts.failed == 0


async def _done(c: echomq.Consumer, n: int) -> bool:
    return c.counts.completed >= n


async def test_the_sends_own_error_goes_back_to_the_consumer_which_retries(
    q: echomq.Queue, start: Start
) -> None:
    calls = 0

    async def around(items: Sequence[Completion], send: Send) -> list[bool]:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first batch: a send that raises (refused before it is sent)
            return await send([(j, t, "not bytes") for j, t, _ in items])  # type: ignore[misc]
        return await send(items)

    jid = await q.lanes.enqueue("a", 1)
    c = await start(echo, hooks=[echomq.Hooks(around_complete=around)])
    await wait_for(lambda: completed(q, 1))
    # The server's count can be read before the consumer has read the reply: wait for its
    # own count too (at c7584f3 this read 0 once, in a whole-suite run).
    await wait_for(lambda: _done(c, 1))
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "completed" and info.result == 1
    assert calls >= 2 and c.counts.completed == 1


# -- on_fail, on_release, after_extend ---------------------------------------------------------


async def test_on_fail_sees_the_error_and_the_outcome(q: echomq.Queue, start: Start) -> None:
    seen: list[tuple[int, str, FailOutcome]] = []

    def on_fail(claim: echomq.Claim, error: BaseException, outcome: FailOutcome) -> None:
        seen.append((claim.token, str(error), outcome))

    async def handler(claim: echomq.Claim) -> None:
        raise echomq.Retry(10, f"no {claim.token}")

    await q.lanes.enqueue("a", 1, max_attempts=2)
    await start(handler, hooks=[echomq.Hooks(on_fail=on_fail)])
    await wait_for(lambda: _len_at_least(seen, 2))
    assert seen == [(1, "no 1", "scheduled"), (2, "no 2", "dead")]


async def _len_at_least(items: Sequence[Any], n: int) -> bool:
    return len(items) >= n


async def test_on_release_sees_the_hand_back_of_a_dependency_down(
    q: echomq.Queue, start: Start
) -> None:
    released: list[tuple[str, bool]] = []
    down = True

    def on_release(claim: echomq.Claim, ok: bool) -> None:
        released.append((claim.job_id, ok))

    async def handler(claim: echomq.Claim) -> None:
        if down:
            raise echomq.Unavailable("the database")

    jid = await q.lanes.enqueue("a", 1)
    c = await start(handler, hooks=[echomq.Hooks(on_release=on_release)], probe_max_ms=50)
    await wait_for(lambda: _len_at_least(released, 1))
    assert released[0] == (jid, True)
    down = False
    await wait_for(lambda: completed(q, 1))
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "completed"
    assert c.counts.unavailable >= 1


async def test_on_release_sees_a_stops_releases(q: echomq.Queue) -> None:
    released: list[tuple[str, bool]] = []
    gate = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        await gate.wait()  # never: the stop's grace runs out and the job is released

    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(3)]
    c = echomq.Consumer(
        q,
        handler,
        concurrency=1,
        prefetch=2,
        grace_ms=50,
        hooks=[echomq.Hooks(on_release=lambda claim, ok: released.append((claim.job_id, ok)))],
    )
    task = asyncio.create_task(c.run())
    await wait_for(lambda: _len_at_least(c.in_flight, 3))
    c.stop()
    await asyncio.wait_for(task, 10)
    assert sorted(released) == sorted((j, True) for j in ids)
    assert await states(q, ids) == ["pending"] * 3


async def test_after_extend_sees_the_verdicts_before_the_lost_handler_is_cancelled(
    q: echomq.Queue, start: Start
) -> None:
    seen: list[tuple[list[str], list[bool], bool]] = []
    running: dict[str, asyncio.Task[Any]] = {}

    def after_extend(claims: Sequence[echomq.Claim], verdicts: Sequence[bool]) -> None:
        task = running.get(claims[0].job_id)
        cancelling = task is not None and task.cancelling() > 0
        seen.append(([c.job_id for c in claims], list(verdicts), cancelling))

    async def handler(claim: echomq.Claim) -> None:
        running[claim.job_id] = asyncio.current_task()  # type: ignore[assignment]
        await asyncio.sleep(30)

    jid = await q.lanes.enqueue("a", 1)
    c = await start(handler, lease_ms=300, hooks=[echomq.Hooks(after_extend=after_extend)])
    await wait_for(lambda: _len_at_least(seen, 1))
    assert seen[0][:2] == ([jid], [True])
    [held] = c.in_flight
    assert await q.jobs.release(jid, held.token)  # the lease goes elsewhere
    await wait_for(lambda: _any_false(seen))
    lost = next(s for s in seen if s[1] == [False])
    assert lost[0] == [jid] and lost[2] is False  # not yet cancelled when the hook ran
    await wait_for(lambda: _is_lost(c))


async def _any_false(seen: Sequence[tuple[list[str], list[bool], bool]]) -> bool:
    return any(s[1] == [False] for s in seen)


async def _is_lost(c: echomq.Consumer) -> bool:
    return c.counts.lost == 1


# -- on_enqueue --------------------------------------------------------------------------------


async def test_on_enqueue_adds_headers_on_both_enqueues_after_the_callers(
    q: echomq.Queue, start: Start
) -> None:
    def add(headers: Mapping[str, str]) -> Mapping[str, str]:
        return {**headers, "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}

    hooked = echomq.Queue(q.conn, q.name, hooks=[echomq.Hooks(on_enqueue=add)])
    a = await hooked.lanes.enqueue("a", 1, headers={"tenant": "t1"})
    b = await hooked.jobs.enqueue(2)
    c = await q.lanes.enqueue("a", 3)  # the same queue through an object without the hook
    seen: dict[str, Mapping[str, str]] = {}

    async def handler(claim: echomq.Claim) -> None:
        seen[claim.job_id] = claim.headers

    await start(handler, source="lanes")
    await wait_for(lambda: _len_at_least(list(seen), 2))
    assert seen[a] == {"tenant": "t1", "traceparent": add({})["traceparent"]}
    assert seen[c] == {}
    info = await q.jobs.get(b)
    assert info is not None and info.headers == add({})


@pytest.mark.parametrize(
    "hook",
    [
        lambda headers: 1 / 0,
        lambda headers: {"": "an empty name"},
        lambda headers: {"x": "y" * 100_000},
        lambda headers: "not a mapping",
    ],
    ids=["raises", "empty name", "too big", "not a mapping"],
)
async def test_a_broken_on_enqueue_never_refuses_the_enqueue(
    q: echomq.Queue, hook: Callable[[Mapping[str, str]], Any]
) -> None:
    hooked = q.using(q.conn)
    hooked.add_hooks(echomq.Hooks(on_enqueue=hook))
    jid = await hooked.lanes.enqueue("a", 1, headers={"kept": "yes"})
    info = await q.jobs.get(jid)
    assert info is not None and info.state == "pending" and info.headers == {"kept": "yes"}
    with pytest.raises(ValueError, match="empty"):  # the caller's own errors are the caller's
        await hooked.lanes.enqueue("a", 1, headers={"": "x"})


async def test_hooks_must_be_hooks(q: echomq.Queue) -> None:
    with pytest.raises(TypeError, match="echomq.Hooks"):
        echomq.Consumer(q, echo, hooks=[lambda c: c])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="echomq.Hooks"):
        echomq.Queue(q.conn, q.name, hooks=[object()])  # type: ignore[list-item]
    hooked = echomq.Queue(q.conn, q.name, hooks=[echomq.Hooks()])
    assert hooked.using(q.conn).hooks == hooked.hooks


async def test_every_notification_raising_changes_no_jobs_fate(
    q: echomq.Queue, start: Start
) -> None:
    called: list[str] = []

    def broken(point: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            called.append(point)
            raise RuntimeError(f"{point} is broken")

        return hook

    async def handler(claim: echomq.Claim) -> str:
        if claim.token == 1:
            raise echomq.Retry(10, "once")
        await asyncio.sleep(0.5)  # past a few renewals of its 300 ms lease
        return "ok"

    hooks = echomq.Hooks(
        on_claim=broken("on_claim"),
        on_fail=broken("on_fail"),
        on_release=broken("on_release"),
        after_extend=broken("after_extend"),
    )
    ids = [await q.lanes.enqueue(f"l{i}", i) for i in range(3)]
    c = await start(handler, hooks=[hooks], lease_ms=300, concurrency=3)
    await wait_for(lambda: completed(q, 3))
    assert await states(q, ids) == ["completed"] * 3
    assert c.counts.lost == 0 and c.counts.failed == 3 and c.counts.stale == 0
    assert {"on_claim", "on_fail", "after_extend"} <= set(called)
