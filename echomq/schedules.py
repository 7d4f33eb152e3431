"""``q.schedules``: jobs enqueued on a period (``every_ms``) or a cron expression, exactly
once per tick however many consumers run them (``echomq.consumer.scheduler``).

Each tick is one script (``lua/schedule_tick.lua``): it checks the next due time stored in
Valkey against the server clock, enqueues the tick's job and stores the next due time, and
refuses a caller that read an older one. Cron expressions are evaluated here (``cronsim``,
the ``cron`` extra), in UTC; the script only stores what they yield.

Missed ticks (the tick after the due one is due too: no consumer ran for a period):
``missed="skip"`` drops every due tick and goes on with the first one after now;
``missed="catch_up_one"`` fires one job, for the oldest due tick, and then goes on with the
first one after now. Both count the ticks that got no job of their own in
:attr:`ScheduleInfo.missed`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from . import checks
from .codec import dumps, loads, number, text
from .ids import _encode
from .scripts import SCRIPTS, Call

if TYPE_CHECKING:
    from .queue import Queue

Missed = Literal["skip", "catch_up_one"]
MISSED: tuple[Missed, ...] = ("skip", "catch_up_one")

# Cron ticks counted one by one beyond the first missed one: a longer outage of a
# every-second schedule counts this many missed, not the exact number.
_MAX_COUNTED = 10_000


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """One schedule as stored: ``next_due_ms`` on the server clock (None while paused),
    ``fired`` jobs enqueued, ``missed`` ticks that got no job of their own."""

    name: str
    payload: Any
    every_ms: int | None
    cron: str | None
    lane: str | None
    missed_policy: Missed
    paused: bool
    next_due_ms: int | None
    fired: int
    missed: int


@dataclass(frozen=True, slots=True)
class Turn:
    """One scheduler turn: the ticks fired, and the ms until the earliest next due time
    (None: no schedule is waiting to tick)."""

    fired: int
    wait_ms: int | None


def tick_job_id(queue: str, name: str, due_ms: int) -> str:
    """The job id of ``name``'s tick at ``due_ms``: a ``JOB_`` ULID whose time is the tick's
    (so it sorts among minted ids by its time) and whose random part hashes the tick."""
    digest = hashlib.sha1(f"{queue}\0{name}\0{due_ms}".encode()).digest()
    rand = int.from_bytes(digest[:10], "big") >> 1
    return f"JOB_{_encode(due_ms, 10)}{_encode(rand, 16)}"


def _cron_after(expr: str, after_ms: int) -> int:
    """The first tick of ``expr`` strictly after ``after_ms`` (UTC), in epoch ms."""
    from cronsim import CronSim

    start = datetime.fromtimestamp(after_ms / 1000, UTC).replace(microsecond=0)
    for tick in CronSim(expr, start):
        ms = int(tick.timestamp() * 1000)
        if ms > after_ms:
            return ms
    raise ValueError(f"cron {expr!r} has no tick after {after_ms}")  # pragma: no cover


def _check_cron(expr: str) -> None:
    try:
        from cronsim import CronSim, CronSimError
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise ImportError("cron schedules need the cron extra: pip install echomq[cron]") from e
    try:
        CronSim(expr, datetime.now(UTC))
    except CronSimError as e:
        raise ValueError(f"cron: {e}") from e


def cron_advance(expr: str, due_ms: int, now_ms: int) -> tuple[int, int, int]:
    """``(after, upcoming, between)`` for a cron tick due at ``due_ms``, at ``now_ms``: the
    tick after it, the first tick after now, and the ticks from ``after`` up to (not
    including) ``upcoming``: the due ticks after ``due_ms``."""
    after = _cron_after(expr, due_ms)
    upcoming, between = after, 0
    while upcoming <= now_ms and between < _MAX_COUNTED:
        upcoming = _cron_after(expr, upcoming)
        between += 1
    if upcoming <= now_ms:
        upcoming = _cron_after(expr, now_ms)
    return after, upcoming, between


class Schedules:
    def __init__(self, queue: Queue) -> None:
        self._q = queue

    def _keys(self, script: str, *own: str) -> list[str]:
        return self._q.keys.script_keys(script, *own)

    async def add(
        self,
        name: str,
        payload: Any,
        *,
        every_ms: int | None = None,
        cron: str | None = None,
        lane: str | None = None,
        missed: Missed = "skip",
        max_attempts: int = checks.DEFAULT_MAX_ATTEMPTS,
    ) -> int:
        """Create (or replace, unpaused) the schedule ``name``: a job of ``payload`` every
        ``every_ms`` or at each tick of ``cron`` (five fields, or six with seconds first; UTC),
        onto ``lane`` (None: the plain queue). Returns its first due time (server clock):
        now + ``every_ms``, or cron's first tick after now."""
        checks.name("schedule name", name)
        checks.optional_integer("every_ms", every_ms, at_least=1)
        checks.optional_name("lane", lane)
        checks.attempts(max_attempts)
        if cron is not None and not isinstance(cron, str):
            raise TypeError(f"cron must be a str, got {type(cron).__name__}")
        if (every_ms is None) == (cron is None):
            raise ValueError("give exactly one of every_ms and cron")
        if missed not in MISSED:
            raise ValueError(f"missed must be one of {MISSED}, got {missed!r}")
        body = dumps(payload)  # TypeError for a payload JSON cannot carry
        first = 0
        if cron is not None:
            _check_cron(cron)
            first = _cron_after(cron, await self._q.server_time_ms())
        return int(
            await self._q.runner.run(
                SCRIPTS["schedule_add"],
                self._keys("schedule_add", self._q.keys.schedule(name)),
                [name, body, every_ms or 0, cron or "", lane or "", missed, first, max_attempts],
            )
        )

    async def remove(self, name: str) -> bool:
        """Delete the schedule; True if it existed. Jobs it enqueued stay."""
        checks.name("schedule name", name)
        return bool(
            await self._q.runner.run(
                SCRIPTS["schedule_remove"],
                self._keys("schedule_remove", self._q.keys.schedule(name)),
                [name],
            )
        )

    async def pause(self, name: str) -> bool:
        """Stop ``name`` ticking until :meth:`resume` (or :meth:`add` again); True if it
        was running. Ticks due while paused are not fired, nor counted missed."""
        checks.name("schedule name", name)
        r = await self._q.runner.run(
            SCRIPTS["schedule_pause"],
            self._keys("schedule_pause", self._q.keys.schedule(name)),
            [name],
        )
        if int(r) < 0:
            raise KeyError(name)
        return int(r) == 1

    async def resume(self, name: str) -> int | None:
        """Let a paused ``name`` tick again, from now: its next due time (now + ``every_ms``,
        or cron's first tick after now); None if it was not paused."""
        checks.name("schedule name", name)
        info = await self.get(name)
        if info is None:
            raise KeyError(name)
        nxt = 0
        if info.cron is not None:
            nxt = _cron_after(info.cron, await self._q.server_time_ms())
        r = int(
            await self._q.runner.run(
                SCRIPTS["schedule_resume"],
                self._keys("schedule_resume", self._q.keys.schedule(name)),
                [name, nxt],
            )
        )
        if r == -1:
            raise KeyError(name)
        return None if r == -2 else r

    async def get(self, name: str) -> ScheduleInfo | None:
        """The schedule ``name``, or None."""
        checks.name("schedule name", name)
        row = await self._q.conn.hgetall(self._q.keys.schedule(name))
        return _info(name, row) if row else None

    async def list(self) -> list[ScheduleInfo]:
        """Every schedule, the next due first (paused ones last)."""
        names = [text(n) for n in await self._q.conn.zrange(self._q.keys.schedules, 0, -1)]
        if not names:
            return []
        pipe = self._q.conn.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(self._q.keys.schedule(n))
        rows = await pipe.execute()
        return [_info(n, row) for n, row in zip(names, rows, strict=True) if row]

    async def run_due(self, limit: int = 100) -> Turn:
        """Fire every due tick of up to ``limit`` schedules, in one round trip (each tick
        its own script call, refused if another caller fired it first); what a consumer's
        scheduler calls."""
        checks.integer("limit", limit, at_least=1)
        r = await self._q.runner.run(SCRIPTS["schedule_due"], self._keys("schedule_due"), [limit])
        now, earliest = int(r[0]), int(float(r[1]))
        calls: list[Call] = []
        for i in range(2, len(r), 3):
            name, due, cron = text(r[i]), int(float(r[i + 1])), text(r[i + 2])
            after, upcoming, between = cron_advance(cron, due, now) if cron else (0, 0, 0)
            job_id = tick_job_id(self._q.name, name, due)
            keys = self._keys(
                "schedule_tick", self._q.keys.schedule(name), self._q.keys.job(job_id)
            )
            calls.append(
                (SCRIPTS["schedule_tick"], keys, [name, due, job_id, after, upcoming, between])
            )
        replies = await self._q.runner.run_many(calls)
        fired = sum(int(kind) == 1 for kind, _ in replies)
        if len(calls) == limit:
            return Turn(fired, 0)  # more may be due
        nexts = [int(nxt) for kind, nxt in replies if int(kind) >= 0 and int(nxt) > 0]
        if earliest >= 0:
            nexts.append(earliest)
        return Turn(fired, max(0, min(nexts) - now) if nexts else None)


def _info(name: str, row: dict[Any, Any]) -> ScheduleInfo:
    def g(field: str) -> str:
        return text(row.get(field.encode(), row.get(field)))

    paused = g("paused") == "1"
    every = number(g("every"))
    return ScheduleInfo(
        name=name,
        payload=loads(g("body")),
        every_ms=every or None,
        cron=g("cron") or None,
        lane=g("lane") or None,
        missed_policy="catch_up_one" if g("policy") == "catch_up_one" else "skip",
        paused=paused,
        next_due_ms=None if paused else number(g("next")),
        fired=number(g("fired")),
        missed=number(g("missed")),
    )
