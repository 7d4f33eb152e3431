"""Rounds: open for ``round_seconds`` on the Valkey server clock, rotated by a delayed job.

When a round opens, a delayed EchoMQ job is enqueued on the ``rounds`` queue, due at its
close. Whichever worker claims that job swaps the current round for a new one with a
compare-and-set script (``lua/open_round.lua``, run by :class:`echomq.scripts.Script`), so however
many web and worker processes run — and however often the close job is delivered — exactly
one round follows each close. A crash between the swap and enqueueing the next close job heals
itself: the redelivered close job (or :meth:`Rounds.ensure`) finds the successor
already open and enqueues its close job, idempotently by its pre-minted id.

The same queue carries the game's periodic sweep (``Rounds.ensure``, then the durable
floor's archive): one EchoMQ schedule, :data:`~codemojex.keys.SWEEP_SCHEDULE`, whose tick
is enqueued once however many workers run, so the game sweeps once per tick, not once per
worker. Its jobs carry :data:`SWEEP_PAYLOAD`; a close job carries ``{"round_id": ...}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

import echomq
import echomq.ids
import echomq.scripts
from codemojex import keys, store
from codemojex.config import ROUND_QUEUE, Config
from codemojex.rules import new_secret
from codemojex.views import RoundView

# A close handled this long after closes_at means the game was down: open a fresh round
# now rather than a back-dated one that would already be over (no catch-up).
DOWNTIME_TOLERANCE_MS = 5_000

# The sweep's period: a round whose close job was lost is replaced within this, and a
# dead job reaches SQL within it.
SWEEP_EVERY_MS = 5_000
SWEEP_PAYLOAD: dict[str, str] = {"kind": "sweep"}


def is_sweep(payload: Any) -> bool:
    """Whether a rounds-queue job is a sweep tick (else it is a round's close job)."""
    return isinstance(payload, dict) and payload.get("kind") == SWEEP_PAYLOAD["kind"]


_OPEN_ROUND = echomq.scripts.Script.from_file(Path(__file__).with_name("lua") / "open_round.lua")


@dataclass(frozen=True, slots=True)
class RoundInfo(store.Round):
    """A round as the game holds it: the stored round, plus what only Valkey keeps of it
    (the rotation's close job and predecessor, which SQL has no use for)."""

    close_job: str = ""
    prev: str = ""

    def is_open(self, now_ms: int) -> bool:
        return self.opens_at_ms <= now_ms < self.closes_at_ms

    def public(self, now_ms: int) -> RoundView:
        """The round as anyone may see it: the secret only once it is closed."""
        closed = now_ms >= self.closes_at_ms
        out: RoundView = {
            "round_id": self.round_id,
            "length": self.length,
            "palette": list(self.palette),
            "opens_at": self.opens_at_ms,
            "closes_at": self.closes_at_ms,
            "state": "closed" if closed else "open",
        }
        if closed:
            out["secret"] = list(self.secret)
        return out

    @classmethod
    def from_hash(cls, row: dict[Any, Any]) -> RoundInfo:
        g = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in row.items()
        }
        return cls(
            round_id=g["round_id"],
            length=int(g["length"]),
            palette=tuple(orjson.loads(g["palette"])),
            secret=tuple(orjson.loads(g["secret"])),
            opens_at_ms=int(g["opens_at"]),
            closes_at_ms=int(g["closes_at"]),
            close_job=g.get("close_job", ""),
            prev=g.get("prev", ""),
        )

    @classmethod
    def from_record(cls, r: store.Round) -> RoundInfo:
        return cls(r.round_id, r.length, r.palette, r.secret, r.opens_at_ms, r.closes_at_ms)


class Rounds:
    def __init__(self, conn: Any, engine: AsyncEngine, config: Config) -> None:
        self.conn = conn
        self.engine = engine
        self.config = config
        self.queue = echomq.Queue(conn, ROUND_QUEUE)
        self._cache: dict[str, RoundInfo] = {}  # rounds never change once opened

    async def current(self) -> RoundInfo | None:
        raw = await self.conn.get(keys.CURRENT_ROUND)
        if raw is None:
            return None
        return await self.get(raw.decode() if isinstance(raw, bytes) else raw)

    async def get(self, round_id: str) -> RoundInfo | None:
        if round_id in self._cache:
            return self._cache[round_id]
        row = await self.conn.hgetall(keys.round_key(round_id))
        if row:
            info = RoundInfo.from_hash(row)
        else:
            rec = await store.get_round(self.engine, round_id)
            if rec is None:
                return None
            info = RoundInfo.from_record(rec)
        self._cache[round_id] = info
        return info

    async def ensure(self) -> RoundInfo:
        """Make sure a round is current and its close job exists; returns the current round."""
        info = await self.current()
        if info is None:
            await self._open(expected="")
            info = await self.current()
            assert info is not None
        await self._schedule_close(info)
        return info

    async def schedule_sweep(self) -> bool:
        """Make sure the sweep's schedule exists as the game needs it; True if this call
        (re)wrote it. ``add`` restarts a schedule's period from now, so a schedule already
        right is left alone: workers that keep restarting (a crash loop, a kill storm)
        would otherwise push its tick back at every start and no sweep would ever fire.
        Two workers that both find it missing both add it, the later a few ms after. A
        paused one is added again, unpaused: the game relies on its sweeps."""
        have = await self.queue.schedules.get(keys.SWEEP_SCHEDULE)
        if (
            have is not None
            and not have.paused
            and have.every_ms == SWEEP_EVERY_MS
            and have.cron is None
            and have.lane is None
            and have.missed_policy == "skip"
            and have.payload == SWEEP_PAYLOAD
        ):
            return False
        await self.queue.schedules.add(
            keys.SWEEP_SCHEDULE, SWEEP_PAYLOAD, every_ms=SWEEP_EVERY_MS, missed="skip"
        )
        return True

    async def handle_close(self, claim: echomq.Claim) -> dict[str, Any]:
        """Handler of the ``rounds`` queue: close ``payload.round_id``, open its successor."""
        closing = str(claim.payload["round_id"])
        current = await self.current()
        if current is not None and current.round_id == closing:
            await self._open(expected=closing)
            current = await self.current()
        if current is not None and current.prev == closing:
            await self._schedule_close(current)
            return {"closed": closing, "opened": current.round_id}
        return {"closed": closing, "opened": None}

    async def _open(self, expected: str) -> None:
        cfg = self.config
        round_id = echomq.ids.branded("RND")
        reply = await _OPEN_ROUND.run(
            self.conn,
            [keys.CURRENT_ROUND, keys.round_key(round_id), keys.round_key(expected or round_id)],
            [
                expected,
                round_id,
                cfg.length,
                orjson.dumps(list(cfg.palette)),
                orjson.dumps(list(new_secret(cfg.palette, cfg.length))),
                cfg.round_seconds * 1000,
                echomq.ids.job_id(),
                DOWNTIME_TOLERANCE_MS,
            ],
        )
        if int(reply[0]) == 1:
            info = await self.get(round_id)
            assert info is not None
            await store.save_round(self.engine, info)

    async def _schedule_close(self, info: RoundInfo) -> None:
        # The round is in SQL before anyone can score a guess of it (idempotent insert).
        await store.save_round(self.engine, info)
        now = await self.queue.server_time_ms()
        await self.queue.jobs.enqueue(
            {"round_id": info.round_id},
            job_id=info.close_job,
            delay_ms=max(0, info.closes_at_ms - now),
            max_attempts=100,
        )
