"""Submitting a guess: validate, mint its JOB id, enqueue it — one Valkey round trip.

Everything else is settled inside the one enqueue script (``Lanes.submit``), in the
contract's order and before its first write: the ``Idempotency-Key`` (bound to the job only
when the guess is accepted; a replay is answered as a replay, a different body is a
conflict), the round's deadline, the player's rate (a token bucket on the server clock) and
pending cap, and the guess's sequence number. A refused or replayed submission takes no
number, no token and leaves no key behind.

A player the script has just refused for its rate is refused again here, without the round
trip, while this process can tell the script would refuse it too (:class:`BucketMirror`,
an upper bound on the bucket from the script's own answers) — after the same checks, in the
same order: a guess that is malformed, for an unknown round or for a round about to close
still gets its 400, 404 or 409 first. An ``Idempotency-Key`` this process saw bound (the
retry of an accepted guess) is always asked about: its answer is the replay. One this
process never saw is refused like a new guess; with several web processes, a retry that
lands on another process than its acceptance did, while the player is over its rate, is
answered ``429`` and gets its replay once ``Retry-After`` has passed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import orjson

import echomq
from codemojex import tracing
from codemojex.admission import BucketMirror, Limits
from codemojex.config import Config
from codemojex.errors import (
    IdempotencyConflict,
    LaneFull,
    RateLimited,
    RoundClosed,
    RoundNotFound,
    Unavailable,
    retry_after_s,
)
from codemojex.rounds import Rounds
from codemojex.rules import validate_guess

IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000
FIFO_LANE = "fifo"
# A guess is refused locally only while its round is open for at least this much longer
# on this machine's clock: closer to the close, Valkey's clock decides 409 or 429.
CLOSE_MARGIN_MS = 2_000
# Idempotency keys this process saw bound, remembered so their retries reach Valkey.
BOUND_KEYS_KEPT = 100_000


def guess_payload(player_id: str, round_id: str, cells: list[str], *, fifo: bool) -> dict[str, Any]:
    """The job payload of a guess: its round and emojis. The player rides in it only on the
    one FIFO lane; on a lane of its own the lane already is the player, and repeating it
    would cost every pending guess 45 bytes of Valkey memory (docs/performance.md)."""
    payload: dict[str, Any] = {"round_id": round_id, "guess": cells}
    if fifo:
        payload["player_id"] = player_id
    return payload


def player_of(payload: Any, lane: str | None) -> str | None:
    """The player of a guess job: its payload's ``player_id`` where it names one (the FIFO
    lane's jobs always do), else its lane, the player's own."""
    named = payload.get("player_id") if isinstance(payload, dict) else None
    if named is not None:
        return str(named)
    return lane if lane and lane != FIFO_LANE else None


def idempotency_key(player_id: str, key: str) -> str:
    """The dedup key of a player's ``Idempotency-Key`` (digested: any printable key, one
    bounded name)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"idem:{player_id}:{digest}"


def fingerprint(round_id: str, cells: tuple[str, ...] | list[str]) -> str:
    """What "the same body" means for an ``Idempotency-Key``: the round and the guess."""
    return hashlib.sha256(orjson.dumps([round_id, list(cells)])).hexdigest()


@dataclass(frozen=True, slots=True)
class Accepted:
    job_id: str
    seq: int
    created: bool  # False: a replay of an earlier submission, nothing enqueued


class Guesses:
    def __init__(self, queues: echomq.Partitioned, rounds: Rounds, config: Config) -> None:
        self.queues = queues
        self.rounds = rounds
        self.config = config
        self.limits = Limits.of(config)
        self.mirror = BucketMirror(self.limits.guess_rate, self.limits.guess_burst)
        self.local_refusals = 0  # guesses refused by the mirror, without a round trip
        self._bound: dict[str, None] = {}  # dedup keys bound through this process

    def lane_of(self, player_id: str) -> str:
        """The lane of ``player_id``'s guesses: their own, or the one FIFO lane."""
        return FIFO_LANE if self.config.fifo else player_id

    async def submit(
        self, player_id: str, round_id: str, guess: object, idempotency_key_: str | None = None
    ) -> Accepted:
        """Accept one guess (docs/contract.md §1, §4). Checks in the contract's order: the guess's
        shape (400), the round (404), an idempotency conflict or a closed round (409), the
        rate and the pending cap (429). One Valkey round trip once the round is cached."""
        cells = validate_guess(guess, self.config.palette, self.config.length)
        rnd = await self.rounds.get(round_id)
        if rnd is None:
            raise RoundNotFound("no such round")
        payload = guess_payload(player_id, round_id, list(cells), fifo=self.config.fifo)
        dedup = None
        if idempotency_key_ is not None:
            dedup = echomq.Dedup(
                idempotency_key(player_id, idempotency_key_),
                fingerprint(round_id, cells),
                IDEMPOTENCY_TTL_MS,
            )
        limits = self.limits
        rate = limits.guess_rate
        lane = self.lane_of(player_id)
        mirror = self.mirror
        if (
            rate
            and (dedup is None or dedup.key not in self._bound)
            and time.time() * 1000 + CLOSE_MARGIN_MS < rnd.closes_at_ms
        ):
            wait_s = mirror.wait_s(player_id)
            if wait_s > 0:
                self.local_refusals += 1
                raise self._rate_limited(retry_after_s(int(wait_s * 1000) + 1))
        mark = mirror.mark(player_id)
        try:
            with tracing.enqueueing(lane, player_id, round_id) as trace:
                receipt = await self.queues.of_lane(lane).lanes.submit(
                    lane,
                    payload,
                    # the cap and the rate are the player's, on a lane of their own or on FIFO's
                    load_subject=player_id,
                    max_pending=limits.lane_cap,
                    deadline_ms=rnd.closes_at_ms,
                    seq_scope=f"{round_id}:{player_id}" if self.config.fifo else round_id,
                    dedup=dedup,
                    rate_subject=player_id,
                    rate_per_s=rate,
                    rate_burst=limits.guess_burst,
                    headers=trace.headers,  # None unless tracing: no field stored
                )
                trace.enqueued(receipt.job_id, receipt.created)
        except echomq.DedupConflict:
            if dedup is not None:
                self._remember_bound(dedup.key)  # bound elsewhere: its retries say 409 too
            raise IdempotencyConflict(
                "this Idempotency-Key was used with a different body"
            ) from None
        except echomq.DeadlinePassed:
            raise RoundClosed(f"round {round_id} is closed") from None
        except echomq.RateLimited as exc:
            mirror.refused(player_id, exc.retry_after_ms, mark)
            raise self._rate_limited(retry_after_s(exc.retry_after_ms)) from None
        except echomq.NotReplicated:
            # Never a 202 that a failover could take back: the guess may exist on the
            # master, so a retry with the same Idempotency-Key is answered as a replay.
            if dedup is not None:
                self._remember_bound(dedup.key)
            raise Unavailable(
                "the guess was not confirmed on a replica in time; try again "
                "(with the same Idempotency-Key)",
                retry_after_s=1,
            ) from None
        except echomq.LaneFull:
            raise LaneFull(
                retry_after_s=1,
                detail=(f"you already have {limits.lane_cap} guesses waiting to be scored"),
            ) from None
        assert receipt.seq is not None
        if receipt.created:
            mirror.took(player_id, mark)
        if dedup is not None:
            self._remember_bound(dedup.key)
        return Accepted(receipt.job_id, receipt.seq, receipt.created)

    def _rate_limited(self, wait_s: int) -> RateLimited:
        limits = self.limits
        return RateLimited(
            retry_after_s=wait_s,
            detail=(
                f"at most {_rate_text(limits.guess_rate)} guesses a second (bursts of "
                f"{limits.guess_burst}); slow down and try again in {wait_s} s"
            ),
        )

    def _remember_bound(self, key: str) -> None:
        bound = self._bound
        if key in bound:
            return
        if len(bound) >= BOUND_KEYS_KEPT:
            del bound[next(iter(bound))]  # the oldest first: retries come soon or not at all
        bound[key] = None


def _rate_text(rate: float) -> str:
    return str(int(rate)) if rate == int(rate) else f"{rate:g}"
