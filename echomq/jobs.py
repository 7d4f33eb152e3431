"""``q.jobs``: the plain FIFO queue and the fenced transitions every job goes through."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from . import checks, results
from .cancel import cancel as cancel_job
from .checks import DEFAULT_MAX_ATTEMPTS
from .codec import dumps, text
from .codes import refuse
from .ids import job_id as mint_job_id
from .keys import Keys
from .scripts import SCRIPTS, Call
from .types import Claim, ClaimBatch, FailOutcome, JobInfo, ProgressSink, lease_of

if TYPE_CHECKING:
    from .queue import Queue

HandBack = Literal["released", "stale", "exhausted"]
_HAND_BACK: dict[int, HandBack] = {0: "stale", 1: "released", 2: "exhausted"}


def decode_batch(reply: list[Any], sink: ProgressSink | None = None) -> ClaimBatch:
    next_due = int(reply[1])
    return ClaimBatch(
        claims=[Claim.from_reply(row, sink) for row in reply[2:]],
        server_now_ms=int(reply[0]),
        next_due_ms=None if next_due < 0 else next_due,
    )


def encode_result(result: Any) -> bytes:
    """A handler's result as stored (``b""`` for None); ``TypeError`` if JSON cannot carry it."""
    return b"" if result is None else dumps(result)


def encode_headers(headers: Mapping[str, str] | None) -> bytes:
    """Checked headers as the enqueue scripts store them; ``b""`` (no field) for none."""
    checked = checks.headers(headers)
    return dumps(checked) if checked else b""


# A claim call's ids, kept for a client's re-run after a lost reply (redis-py retries for
# up to ~10 s), at most the lease: after it the jobs are the reaper's.
CLAIM_MEMO_MS = 60_000
COMPLETE_CHUNK = 256  # jobs per complete call: no one call holds the server for long
ENQUEUE_CHUNK = 1_000  # jobs per enqueue_many call: bounded work per script call

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000


def check_priority(priority: Any) -> int:
    """A priority: an ``int`` in ``[-1000, 1000]``; higher is claimed first."""
    return checks.integer("priority", priority, at_least=PRIORITY_MIN, at_most=PRIORITY_MAX)


def check_due(delay_ms: Any, run_at_ms: Any) -> tuple[int, int]:
    """``(delay_ms, run_at_ms or 0)`` checked: both on the server clock, never both given."""
    checks.integer("delay_ms", delay_ms, at_least=0)
    checks.optional_integer("run_at_ms", run_at_ms, at_least=0)
    if run_at_ms is not None and delay_ms:
        raise ValueError("give delay_ms or run_at_ms, not both")
    return delay_ms, run_at_ms or 0


def mint_claim_id() -> str:
    """A claim call's id, random from the client: a server that lost writes never reissues it."""
    return os.urandom(8).hex()


def claim_args(
    worker_id: str, lease_ms: int, count: int, claim_id: str | None, promote_limit: int
) -> list[str | int]:
    """The claim scripts' ARGV, every argument checked first."""
    checks.name("worker_id", worker_id)
    checks.integer("lease_ms", lease_ms, at_least=1)
    checks.integer("count", count, at_least=1)
    checks.optional_name("claim_id", claim_id)
    cid = claim_id or mint_claim_id()
    return [worker_id, lease_ms, count, promote_limit, cid, min(lease_ms, CLAIM_MEMO_MS)]


def claim_keys(keys: Keys, script: str, args: Sequence[str | int]) -> list[str]:
    """The claim scripts' KEYS for ``args`` (:func:`claim_args`)."""
    worker, claim_id = str(args[0]), str(args[4])
    return keys.script_keys(
        script, keys.worker_jobs(worker), keys.worker(worker), keys.claim(claim_id)
    )


def enqueue_call(
    keys: Keys,
    job_id: str,
    body: bytes | str,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    delay_ms: int = 0,
    attempts: int = 0,
    headers: bytes | str = "",
    priority: int = 0,
    run_at_ms: int = 0,
) -> Call:
    """The ``enqueue.lua`` call :meth:`Jobs.enqueue` sends (arguments checked and encoded),
    for a caller that pipelines its own."""
    args: list[str | int | bytes] = [job_id, body, max_attempts, delay_ms, attempts, headers]
    if priority or run_at_ms:  # the usual call sends nothing for what it does not use
        args += [priority, run_at_ms]
    return SCRIPTS["enqueue"], keys.script_keys("enqueue", keys.job(job_id)), args


class Jobs:
    def __init__(self, queue: Queue) -> None:
        self._q = queue
        self._keys = queue.keys
        self._run = queue.runner.run

    async def enqueue(
        self,
        payload: Any,
        *,
        job_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        delay_ms: int = 0,
        attempts: int = 0,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        run_at_ms: int | None = None,
    ) -> str:
        """Append to the plain queue, or schedule it: after ``delay_ms``, or at
        ``run_at_ms`` (epoch ms; not both), both on the server clock (a time already past
        is now). An id that already exists is a no-op returning that id. ``attempts``
        seeds the fencing token (a job revived from elsewhere). ``headers`` (str -> str)
        come back as ``Claim.headers``.

        ``priority`` (-1000…1000): higher is claimed first, FIFO among equals; a retried,
        reaped or released job goes back with its priority. Priority is strict: a job
        waits while any job of higher priority is pending, so its wait is bounded only by
        the higher-priority work enqueued ahead of it (use lanes to bound it per sender).
        """
        checks.optional_name("job_id", job_id)
        checks.integer("max_attempts", max_attempts, at_least=1)
        delay_ms, run_at = check_due(delay_ms, run_at_ms)
        check_priority(priority)
        checks.attempts(attempts)
        encoded_headers = encode_headers(self._q.enqueue_headers(headers))  # hooks first
        body = dumps(payload)  # TypeError for a payload JSON cannot carry
        jid = job_id or mint_job_id()
        reply, acked = await self._q.enqueue_call(
            *enqueue_call(
                self._keys,
                jid,
                body,
                max_attempts,
                delay_ms,
                attempts,
                encoded_headers,
                priority,
                run_at,
            )
        )
        self._q.confirm(text(reply[1]), acked)
        return text(reply[1])

    async def enqueue_many(
        self,
        payloads: Sequence[Any],
        *,
        job_ids: Sequence[str] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        delay_ms: int = 0,
        run_at_ms: int | None = None,
        priority: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Enqueue every payload with the same options (as :meth:`enqueue`), in one script
        call per ``ENQUEUE_CHUNK`` jobs, each call atomic: all its jobs land or none. The
        ids, in order (``job_ids`` names them; an id that exists is a no-op). ``headers``
        go through the hooks once per call and are every job's."""
        if isinstance(payloads, str | bytes) or not isinstance(payloads, Sequence):
            raise TypeError(f"payloads must be a sequence, got {type(payloads).__name__}")
        if job_ids is not None:
            if isinstance(job_ids, str) or not isinstance(job_ids, Sequence):
                raise TypeError(f"job_ids must be a sequence, got {type(job_ids).__name__}")
            if len(job_ids) != len(payloads):
                raise ValueError("job_ids must name one id per payload")
            for jid in job_ids:
                checks.name("job_id", jid)
        checks.integer("max_attempts", max_attempts, at_least=1)
        delay_ms, run_at = check_due(delay_ms, run_at_ms)
        check_priority(priority)
        encoded_headers = encode_headers(self._q.enqueue_headers(headers))  # hooks first
        bodies = [dumps(p) for p in payloads]  # TypeError before anything is sent
        ids = list(job_ids) if job_ids is not None else [mint_job_id() for _ in bodies]
        if not ids:
            return []
        head: list[str | int | bytes] = [max_attempts, delay_ms, run_at, priority, encoded_headers]
        calls: list[Call] = []
        for lo in range(0, len(ids), ENQUEUE_CHUNK):
            chunk = range(lo, min(lo + ENQUEUE_CHUNK, len(ids)))
            args = list(head)
            for i in chunk:
                args += [ids[i], bodies[i]]
            keys = self._keys.script_keys("enqueue_many", *[self._keys.job(ids[i]) for i in chunk])
            calls.append((SCRIPTS["enqueue_many"], keys, args))
        if self._q.settings.replicas:
            for call in calls:  # each call waits for its replicas, as enqueue does
                _, acked = await self._q.enqueue_call(*call)
                self._q.confirm(ids[0], acked)
        else:
            await self._q.runner.run_many(calls)
        return ids

    async def claim(self, worker_id: str, lease_ms: int) -> Claim | None:
        """Lease the first pending job (ZPOPMIN: highest priority, then oldest) until
        server TIME + ``lease_ms``; None when none is pending or the queue is paused."""
        batch = await self.claim_many(worker_id, lease_ms, 1)
        return batch.claims[0] if batch.claims else None

    async def claim_many(
        self, worker_id: str, lease_ms: int, count: int, *, claim_id: str | None = None
    ) -> ClaimBatch:
        """Lease up to ``count`` jobs in one call, each with its own token. Idempotent under
        its ``claim_id``: a re-run within ``min(lease_ms, 60 s)`` answers the jobs the
        first run leased rather than leasing more."""
        reply = await self._run(*self.claim_call(worker_id, lease_ms, count, claim_id))
        return decode_batch(reply, self)

    def claim_call(
        self, worker_id: str, lease_ms: int, count: int, claim_id: str | None = None
    ) -> Call:
        """The call :meth:`claim_many` sends, for a caller that sends it itself; decode its
        reply with :func:`decode_batch`."""
        args = claim_args(worker_id, lease_ms, count, claim_id, self._q.settings.promote_limit)
        return SCRIPTS["claim"], claim_keys(self._keys, "claim", args), args

    def _complete_batch(self, items: Sequence[tuple[str, int, bytes]]) -> Call:
        s = self._q.settings
        rows: list[str] = []
        args: list[str | int | bytes] = [s.keep_completed, s.keep_completed_ms, s.events_maxlen]
        for job_id, token, encoded in items:
            checks.name("job_id", job_id)
            attempts = checks.token(token)
            rows.append(self._keys.job(job_id))
            args += [job_id, attempts, encoded, lease_of(token)]
        return SCRIPTS["complete"], self._keys.script_keys("complete", *rows), args

    async def complete(self, job_id: str, token: int, result: Any = None) -> bool:
        """True: counted once (a repeat under the same token counts nothing twice). False:
        stale; nothing changed."""
        reply = await self._run(*self._complete_batch([(job_id, token, encode_result(result))]))
        return bool(int(reply[0]))

    async def complete_many(self, items: Iterable[tuple[str, int, Any]]) -> list[bool]:
        """Complete several jobs in one round trip; one verdict per item, in order."""
        return await self.complete_encoded([(j, t, encode_result(r)) for j, t, r in items])

    async def complete_encoded(self, items: Iterable[tuple[str, int, bytes]]) -> list[bool]:
        """``complete_many`` with results encoded by :func:`encode_result`, one script call
        per ``COMPLETE_CHUNK`` jobs, each job judged on its own."""
        checked = [(j, t, checks.bytes_("result", r)) for j, t, r in items]
        # A token out of range is no claim's: that item is stale, and is not sent.
        sent = [item for item in checked if checks.token_in_range(item[1]) is not None]
        calls = [
            self._complete_batch(sent[i : i + COMPLETE_CHUNK])
            for i in range(0, len(sent), COMPLETE_CHUNK)
        ]
        replies = await self._q.runner.run_many(calls)
        verdicts = iter([bool(int(v)) for reply in replies for v in reply])
        return [
            next(verdicts) if checks.token_in_range(t) is not None else False for _, t, _ in checked
        ]

    async def fail(
        self, job_id: str, token: int, error: str, retry_in_ms: int | None = None
    ) -> FailOutcome:
        """Record a failed attempt: ``"scheduled"`` for a retry (backoff with jitter unless
        ``retry_in_ms``), ``"dead"`` when out of deliveries, ``"stale"`` when not held."""
        checks.name("job_id", job_id)
        attempts = checks.token(token)
        checks.string("error", error)
        checks.optional_integer("retry_in_ms", retry_in_ms, at_least=0)
        s = self._q.settings
        reply = await self._run(
            SCRIPTS["fail"],
            self._keys.script_keys("fail", self._keys.job(job_id)),
            [
                job_id,
                attempts,
                error,
                -1 if retry_in_ms is None else retry_in_ms,
                random.uniform(-1.0, 1.0),
                s.backoff_ms,
                s.backoff_cap_ms,
                s.jitter,
                s.events_maxlen,
                lease_of(token),
            ],
        )
        return text(reply)  # type: ignore[return-value]

    async def extend(self, job_id: str, token: int, lease_ms: int) -> bool:
        """Renew the lease to server TIME + ``lease_ms``; False when the lease is lost."""
        return bool(await self._run(*self._extend_call(job_id, token, lease_ms)))

    def _extend_call(self, job_id: str, token: int, lease_ms: int) -> Call:
        checks.name("job_id", job_id)
        attempts = checks.token(token)
        checks.integer("lease_ms", lease_ms, at_least=1)
        return (
            SCRIPTS["extend"],
            self._keys.script_keys("extend", self._keys.job(job_id)),
            [job_id, attempts, lease_ms, lease_of(token)],
        )

    async def extend_many(self, items: Sequence[tuple[str, int]], lease_ms: int) -> list[bool]:
        """``extend`` for each item in one round trip; one verdict per item, in order."""
        known = [checks.token_in_range(t) is not None for _, t in items]
        calls = [self._extend_call(j, t, lease_ms) for (j, t), ok in zip(items, known) if ok]
        replies = iter(await self._q.runner.run_many(calls))
        return [bool(next(replies)) if ok else False for ok in known]

    async def release(self, job_id: str, token: int, *, worker_id: str | None = None) -> bool:
        """Back on its lane, no delivery spent. False when stale. With ``worker_id`` the job
        must be leased to that worker too."""
        checks.name("job_id", job_id)
        attempts = checks.token(token)
        checks.optional_name("worker_id", worker_id)
        return bool(
            await self._run(
                SCRIPTS["release"],
                self._keys.script_keys("release", self._keys.job(job_id)),
                [job_id, attempts, worker_id or "", lease_of(token)],
            )
        )

    async def hand_back(self, job_id: str, token: int, bound: int) -> HandBack:
        """``release`` for a handler that raised :class:`~echomq.Unavailable`, striking the job
        when other jobs completed since its last hand-back. ``"exhausted"``: ``bound``
        strikes, not released, still active for the caller to fail."""
        checks.name("job_id", job_id)
        attempts = checks.token(token)
        checks.integer("bound", bound, at_least=1)
        code = await self._run(
            SCRIPTS["release"],
            self._keys.script_keys("release", self._keys.job(job_id)),
            [job_id, attempts, "", lease_of(token), bound],
        )
        return _HAND_BACK[int(code)]

    async def get(self, job_id: str) -> JobInfo | None:
        checks.name("job_id", job_id)
        row = await self._q.conn.hgetall(self._keys.job(job_id))
        return JobInfo.from_hash(row, job_id) if row else None

    async def retry_dead(self, job_id: str) -> None:
        """Send a dead job back to its lane with fresh deliveries (attempts kept)."""
        checks.name("job_id", job_id)
        code = await self._run(
            SCRIPTS["retry_dead"],
            self._keys.script_keys("retry_dead", self._keys.job(job_id)),
            [job_id],
        )
        refuse("retry_dead", int(code), {"job_id": job_id})

    async def discard(self, job_id: str) -> None:
        """Delete a dead job for good."""
        checks.name("job_id", job_id)
        code = await self._run(
            SCRIPTS["discard"], self._keys.script_keys("discard", self._keys.job(job_id)), [job_id]
        )
        refuse("discard", int(code), {"job_id": job_id})

    async def dead(self, limit: int = 100, *, since_ms: int = 0, offset: int = 0) -> list[JobInfo]:
        """Dead jobs, oldest death first: at most ``limit`` that died at or after
        ``since_ms`` (server clock), after skipping ``offset``."""
        checks.integer("limit", limit, at_least=1)
        checks.integer("since_ms", since_ms, at_least=0)
        checks.integer("offset", offset, at_least=0)
        ids = await self._q.conn.zrangebyscore(
            self._keys.dead, since_ms, "+inf", start=offset, num=limit
        )
        pipe = self._q.conn.pipeline(transaction=False)
        for jid in ids:
            pipe.hgetall(self._keys.job(text(jid)))
        rows = await pipe.execute()
        return [JobInfo.from_hash(row, text(j)) for j, row in zip(ids, rows, strict=True) if row]

    # Cancel, results and progress live in their own modules; these are their front doors.
    async def cancel(self, job_id: str) -> bool:
        """Cancel a waiting, scheduled or running job (:func:`echomq.cancel.cancel`)."""
        return await cancel_job(self._q, job_id)

    async def result(self, job_id: str, *, timeout_ms: int) -> JobInfo | None:
        """The job once completed, dead or cancelled; None after ``timeout_ms``
        (:func:`echomq.results.result`)."""
        return await results.result(self._q, job_id, timeout_ms)

    async def progress(self, job_id: str, token: int, value: Any) -> bool:
        """A running job's progress under its token (:func:`echomq.results.progress`)."""
        return await results.progress(self._q, job_id, token, value)
