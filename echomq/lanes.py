"""``q.lanes``: fair lanes. Each lane is its own queue (by priority, then FIFO); claims take
lanes in fair order."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from . import checks
from .checks import DEFAULT_MAX_ATTEMPTS
from .codec import dumps, text
from .codes import refuse
from .ids import job_id as mint_job_id
from .jobs import check_due, check_priority, claim_args, claim_keys, decode_batch, encode_headers
from .keys import Keys
from .scripts import SCRIPTS, Call
from .types import Claim, ClaimBatch, Enqueued, JobInfo

if TYPE_CHECKING:
    from .queue import Queue


class Dedup(NamedTuple):
    """A dedup key for :meth:`Lanes.submit`: the same ``key`` and ``fingerprint`` within
    ``ttl_ms`` is answered with the first job's receipt; another fingerprint is refused."""

    key: str
    fingerprint: str
    ttl_ms: int


def _non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if value > checks.MAX_INT:
        raise ValueError(f"{name} must be <= {checks.MAX_INT}, got {value!r}")


def _rate(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"rate_per_s must be a number, got {value!r}")  # noqa: TRY004
    rate = float(value)
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"rate_per_s must be finite and >= 0, got {value!r}")
    return rate


def lane_enqueue_call(
    keys: Keys,
    job_id: str,
    lane: str,
    body: bytes | str,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_pending: int = 0,
    deadline_ms: int = 0,
    seq_scope: str | None = None,
    seq_ttl_ms: int,
    attempts: int = 0,
    load_subject: str | None = None,
    dedup: tuple[str, str, int] = ("", "", 0),
    rate_subject: str | None = None,
    rate_per_s: float = 0,
    rate_burst: int = 0,
    headers: bytes | str = "",
    priority: int = 0,
    delay_ms: int = 0,
    run_at_ms: int = 0,
) -> Call:
    """The ``lane_enqueue.lua`` call :meth:`Lanes.submit` sends (arguments checked and
    encoded), for a caller that pipelines its own."""
    dedup_key, fingerprint, dedup_ttl_ms = dedup
    subject = load_subject or lane
    timing: list[int] = []
    if priority or delay_ms or run_at_ms:  # the usual call sends nothing for what it does not use
        timing = [priority, delay_ms, run_at_ms]
    return (
        SCRIPTS["lane_enqueue"],
        keys.script_keys(
            "lane_enqueue",
            keys.job(job_id),
            keys.lane(lane),
            keys.seq(lane, seq_scope or ""),
            keys.dedup(dedup_key),
            keys.rate(rate_subject or ""),
            keys.open(subject),
            keys.lane(subject),
        ),
        [
            job_id,
            lane,
            body,
            max_attempts,
            max_pending,
            deadline_ms,
            1 if seq_scope is not None else 0,
            seq_ttl_ms,
            attempts,
            load_subject or "",
            fingerprint,
            dedup_ttl_ms,
            repr(rate_per_s) if rate_per_s else 0,
            rate_burst if rate_per_s else 0,
            headers,
            *timing,
        ],
    )


class Lanes:
    def __init__(self, queue: Queue) -> None:
        self._q = queue
        self._keys = queue.keys

    async def enqueue(
        self,
        lane: str,
        payload: Any,
        *,
        job_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        delay_ms: int = 0,
        run_at_ms: int | None = None,
    ) -> str:
        """Append to ``lane``; an id that already exists is a no-op returning that id.
        ``headers``, ``priority``, ``delay_ms``, ``run_at_ms``: as for :meth:`submit`."""
        checks.name("lane", lane)
        checks.optional_name("job_id", job_id)
        checks.integer("max_attempts", max_attempts, at_least=1)
        receipt = await self.submit(
            lane,
            payload,
            job_id=job_id,
            max_attempts=max_attempts,
            headers=headers,
            priority=priority,
            delay_ms=delay_ms,
            run_at_ms=run_at_ms,
        )
        return receipt.job_id

    async def submit(
        self,
        lane: str,
        payload: Any,
        *,
        job_id: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_pending: int = 0,
        deadline_ms: int = 0,
        seq_scope: str | None = None,
        attempts: int = 0,
        load_subject: str | None = None,
        dedup: Dedup | tuple[str, str, int] | None = None,
        rate_subject: str | None = None,
        rate_per_s: float = 0,
        rate_burst: int = 0,
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        delay_ms: int = 0,
        run_at_ms: int | None = None,
    ) -> Enqueued:
        """Enqueue with admission checks, all in the one script that enqueues (one round
        trip), in this order and all before its first write, so a refused call changes
        nothing — no dedup binding, no rate token, no sequence number:

        1. ``job_id`` already exists: its original receipt (``created=False``);
        2. ``dedup=(key, fingerprint, ttl_ms)``: a key already bound with the same
           fingerprint answers with the original receipt (``created=False``), even after
           the deadline; with another fingerprint, :class:`DedupConflict`. The key is bound
           (for ``ttl_ms``) only when the job is accepted;
        3. ``deadline_ms``: refuse with :class:`DeadlinePassed` at or after that server time;
        4. ``rate_subject``/``rate_per_s``/``rate_burst``: a token bucket per subject on the
           server clock (``rate_burst`` tokens, refilled at ``rate_per_s``); empty ->
           :class:`RateLimited` with the wait for the next token. ``rate_per_s=0``: off;
        5. ``max_pending``: refuse with :class:`LaneFull` when ``load_subject`` (default:
           the lane) already has that many unfinished jobs (pending, active or scheduled).
           A subject other than the lane keeps the cap per caller when lanes are shared.

        ``seq_scope``: number the job 0, 1, 2 … within (lane, scope), fixed atomically with
        the enqueue, so refused or replayed submissions take no number.

        ``headers``: str -> str handed back as ``Claim.headers``; a replay keeps the
        original job's.

        ``priority`` (-1000…1000): within the lane, higher is claimed first, FIFO among
        equals; the lane itself keeps its one fair turn among lanes, so priority never
        lets a lane starve another. Starvation rule: a job waits while its own lane holds
        jobs of higher priority (strict, within the lane only); the lane is still claimed
        at least once every 2N claims of N non-empty lanes. A retried, reaped or released
        job goes back with its priority.

        ``delay_ms`` / ``run_at_ms`` (epoch ms; not both), on the server clock: the job
        waits in ``scheduled`` and enters its lane when due, activating the lane as an
        arriving job does. It counts against ``max_pending`` while it waits.
        """
        # Admission arguments answer ValueError for a wrong type too: one thing to catch.
        checks.name("lane", lane)
        checks.optional_name("job_id", job_id)
        checks.integer("max_attempts", max_attempts, at_least=1)
        checks.attempts(attempts)
        if seq_scope is not None and not isinstance(seq_scope, str):
            raise TypeError(f"seq_scope must be a str or None, got {type(seq_scope).__name__}")
        if rate_subject is not None and not isinstance(rate_subject, str):
            raise ValueError(f"rate_subject must be a str or None, got {rate_subject!r}")
        _non_negative_int("max_pending", max_pending)
        _non_negative_int("deadline_ms", deadline_ms)
        delay_ms, run_at = check_due(delay_ms, run_at_ms)
        check_priority(priority)
        if load_subject is not None and (not isinstance(load_subject, str) or not load_subject):
            raise ValueError("load_subject must be a non-empty string or None")
        fingerprint, dedup_key, dedup_ttl_ms = "", "", 0
        if dedup is not None:
            try:
                dedup_key, fingerprint, dedup_ttl_ms = Dedup(*dedup)
            except TypeError:
                raise ValueError("dedup must be (key, fingerprint, ttl_ms)") from None
            if not isinstance(dedup_key, str) or not dedup_key:
                raise ValueError("dedup key must be a non-empty string")
            if not isinstance(fingerprint, str) or not fingerprint:
                raise ValueError("dedup fingerprint must be a non-empty string")
            _non_negative_int("dedup ttl_ms", dedup_ttl_ms)
            if dedup_ttl_ms < 1:
                raise ValueError("dedup ttl_ms must be >= 1")
        rate = _rate(rate_per_s)
        _non_negative_int("rate_burst", rate_burst)
        if rate:
            if not isinstance(rate_subject, str) or not rate_subject:
                raise ValueError("a rate limit needs a non-empty rate_subject")
            if rate_burst < 1:
                raise ValueError("rate_burst must be >= 1 when rate_per_s > 0")
        encoded_headers = encode_headers(self._q.enqueue_headers(headers))  # hooks first
        jid = job_id or mint_job_id()
        reply, acked = await self._q.enqueue_call(
            *lane_enqueue_call(
                self._keys,
                jid,
                lane,
                dumps(payload),
                max_attempts=max_attempts,
                max_pending=max_pending,
                deadline_ms=deadline_ms,
                seq_scope=seq_scope,
                seq_ttl_ms=self._q.settings.seq_ttl_ms,
                attempts=attempts,
                load_subject=load_subject,
                dedup=(dedup_key, fingerprint, dedup_ttl_ms),
                rate_subject=rate_subject,
                rate_per_s=rate,
                rate_burst=rate_burst,
                headers=encoded_headers,
                priority=priority,
                delay_ms=delay_ms,
                run_at_ms=run_at,
            )
        )
        code = int(reply[0])
        refuse(
            "lane_enqueue",
            code,
            {
                "load_subject": load_subject or lane,
                "deadline_ms": deadline_ms,
                "dedup_key": dedup_key,
                "rate_subject": str(rate_subject),
            },
            reply[1],
        )
        self._q.confirm(text(reply[1]), acked)  # a replay waits for the replicas too
        seq = int(reply[2])
        return Enqueued(text(reply[1]), None if seq < 0 else seq, code == 1)

    async def claim(self, worker_id: str, lease_ms: int) -> Claim | None:
        """Lease the first job (highest priority, then oldest) of the next lane in fair
        order; None when no lane holds a job or the queue is paused."""
        batch = await self.claim_many(worker_id, lease_ms, 1)
        return batch.claims[0] if batch.claims else None

    async def claim_many(
        self, worker_id: str, lease_ms: int, count: int, *, claim_id: str | None = None
    ) -> ClaimBatch:
        """Lease up to ``count`` jobs in the order ``count`` single claims would take them;
        idempotent as :meth:`echomq.jobs.Jobs.claim_many` is."""
        return decode_batch(
            await self._q.runner.run(*self.claim_call(worker_id, lease_ms, count, claim_id)),
            self._q.jobs,
        )

    def claim_call(
        self, worker_id: str, lease_ms: int, count: int, claim_id: str | None = None
    ) -> Call:
        """The call :meth:`claim_many` sends, as :meth:`echomq.jobs.Jobs.claim_call`."""
        args = claim_args(worker_id, lease_ms, count, claim_id, self._q.settings.promote_limit)
        return SCRIPTS["lane_claim"], claim_keys(self._keys, "lane_claim", args), args

    async def depth(self, lane: str) -> int:
        """Jobs waiting on ``lane`` (not counting the active or scheduled ones)."""
        checks.name("lane", lane)
        return int(await self._q.conn.zcard(self._keys.lane(lane)))

    async def _unfinished(self, subject: str, limit: int) -> list[Any]:
        keys = self._keys.script_keys(
            "unfinished", self._keys.open(subject), self._keys.lane(subject)
        )
        return list(await self._q.runner.run(SCRIPTS["unfinished"], keys, [subject, limit]))

    async def load(self, subject: str) -> int:
        """Unfinished jobs of a load subject (by default a lane): what ``max_pending`` caps."""
        checks.name("subject", subject)
        return int((await self._unfinished(subject, 0))[0])

    async def unfinished(self, subject: str, limit: int = 1000) -> list[JobInfo]:
        """The oldest ``limit`` unfinished jobs of a load subject, oldest enqueue first, in
        one script call and one round trip whatever the size of the queue."""
        checks.name("subject", subject)
        checks.integer("limit", limit, at_least=1)
        ids = sorted({text(j) for j in (await self._unfinished(subject, limit))[1:]})
        if not ids:
            return []
        pipe = self._q.conn.pipeline(transaction=False)
        for jid in ids:
            pipe.hgetall(self._keys.job(jid))
        rows = await pipe.execute()
        infos = [JobInfo.from_hash(row, j) for j, row in zip(ids, rows, strict=True) if row]
        infos.sort(key=lambda info: (info.enqueued_at_ms, info.job_id))
        return infos[:limit]
