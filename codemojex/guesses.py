"""Submitting a guess: validate, fix its sequence number, mint its JOB id, enqueue it.

The sequence number, the round's deadline and the player's pending cap are all settled
inside the one enqueue script (``Lanes.enqueue`` with ``seq_scope``/``deadline_ms``/
``max_pending``), so a refused or replayed submission takes no number and leaves no trace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

import echomq
from codemojex.config import Config
from codemojex.errors import IdempotencyConflict, LaneFull, RoundClosed, RoundNotFound
from codemojex.rounds import Rounds
from codemojex.rules import validate_guess

IDEMPOTENCY_TTL_S = 24 * 3600
FIFO_LANE = "fifo"


def idempotency_key(player_id: str, key: str) -> str:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"cmx:idem:{player_id}:{digest}"


@dataclass(frozen=True, slots=True)
class Accepted:
    job_id: str
    seq: int
    created: bool  # False: a replay of an earlier submission, nothing enqueued


class Guesses:
    def __init__(self, queue: echomq.Queue, rounds: Rounds, config: Config) -> None:
        self.queue = queue
        self.rounds = rounds
        self.config = config

    async def submit(
        self, player_id: str, round_id: str, guess: object, idempotency_key_: str | None = None
    ) -> Accepted:
        """Accept one guess (CONTRACT §1, §4). Checks in the contract's order: the guess's
        shape (400), the round (404), closed or idempotency conflict (409), lane full (429)."""
        cells = validate_guess(guess, self.config.palette, self.config.length)
        rnd = await self.rounds.get(round_id)
        if rnd is None:
            raise RoundNotFound("no such round")
        payload = {"player_id": player_id, "round_id": round_id, "guess": list(cells)}

        job_id: str | None = None
        idem: str | None = None
        if idempotency_key_ is not None:
            idem = idempotency_key(player_id, idempotency_key_)
            fingerprint = hashlib.sha256(orjson.dumps([round_id, list(cells)])).hexdigest()
            job_id, seq = await self._claim_key(idem, fingerprint)
            if seq is not None:
                return Accepted(job_id, seq, False)

        lane = FIFO_LANE if self.config.fifo else player_id
        try:
            receipt = await self.queue.lanes.submit(
                lane,
                payload,
                job_id=job_id,
                max_pending=0 if self.config.fifo else self.config.lane_cap,
                deadline_ms=rnd.closes_at_ms,
                seq_scope=round_id if not self.config.fifo else f"{round_id}:{player_id}",
            )
        except echomq.LaneFull:
            raise LaneFull(retry_after_s=1, detail=(
                f"you already have {self.config.lane_cap} guesses waiting to be scored"
            )) from None
        except echomq.DeadlinePassed:
            raise RoundClosed(f"round {round_id} is closed") from None
        assert receipt.seq is not None
        if idem is not None:
            await self.queue.conn.hset(idem, "seq", receipt.seq)
        return Accepted(receipt.job_id, receipt.seq, receipt.created)

    async def _claim_key(self, key: str, fingerprint: str) -> tuple[str, int | None]:
        """Bind an idempotency key to a job id (first caller wins), or read the binding.
        Returns the bound job id and, when that job was already accepted, its seq."""
        fresh = echomq.job_id()
        pipe = self.queue.conn.pipeline(transaction=True)
        pipe.hsetnx(key, "job_id", fresh)
        pipe.hsetnx(key, "fp", fingerprint)
        pipe.expire(key, IDEMPOTENCY_TTL_S, nx=True)
        pipe.hmget(key, "job_id", "fp", "seq")
        *_, (job_id, fp, seq) = await pipe.execute()
        if _text(fp) != fingerprint:
            raise IdempotencyConflict("this Idempotency-Key was used with a different body")
        return _text(job_id), (int(seq) if seq is not None else None)


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
