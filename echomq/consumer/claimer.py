"""``Claimer``: the consumer's claim loop, one turn at a time over one ``LoopState``."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from redis.exceptions import TimeoutError as RedisTimeoutError

from ..backoff import Backoff
from ..jobs import decode_batch, mint_claim_id
from ..types import ClaimBatch
from .claims import key_of, split_suspects
from .park import Woken
from .trouble import Trouble
from .waits import wait_any

if TYPE_CHECKING:
    from .consumer import Consumer

log = logging.getLogger("echomq.consumer")


@dataclass(slots=True)
class LoopState:
    """What one turn of the claim loop leaves to the next."""

    batch_now: int  # claim size: halved after a claim whose reply timed out
    # A claim broke in flight: the server may have leased us jobs anyway.
    unsure: bool = False
    # The last claim brought suspects, likely more next in line: claim one at a time.
    careful: bool = False
    # A probe claim found nothing and the claimer parked since: the waker is the probe.
    probe_now: bool = False
    epoch: int = 0  # the outage last seen: a new one resets the probes' backoff
    # The claim that rode behind the last park: its size and answer, or, its answer lost,
    # its size and id to ask again with (the same id answers what it leased, if it ran).
    behind: tuple[int, ClaimBatch] | None = None
    lost: tuple[int, str | None] | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """A claim sent: how many jobs it asked for, what it got, and whether it is a probe."""

    asked: int
    got: ClaimBatch
    probing: bool


class Claimer:
    """Claims jobs for ``consumer`` and puts them on its ready queue until stop()."""

    def __init__(self, consumer: Consumer) -> None:
        self.c = consumer
        o = consumer.options
        self.state = LoopState(batch_now=o.batch, epoch=consumer._outage.epoch)
        self.backoff = Backoff(first=0.1)
        # Drawn in [half, all] of 0.1, 0.2, 0.4 ... s: spread out, never a flurry.
        self.probes = Backoff(
            first=min(0.1, o.probe_max_ms / 1000), cap=o.probe_max_ms / 1000, jitter=False
        )
        self.trouble = Trouble("claim")

    async def run(self) -> None:
        s = self.state
        try:
            while not self.c._stopping.is_set():
                turn = await self.next_claim()
                if turn is not None:
                    await self.take(turn)
        finally:
            if s.behind is not None or s.lost is not None:
                # A claim behind the park taken or in doubt: its jobs back, not left to lapse.
                try:
                    await self.c._release_orphans()
                except Exception as e:  # noqa: BLE001 - best effort: their leases lapse
                    log.warning("could not release a last claim's jobs (%s)", e)

    async def next_claim(self) -> Turn | None:
        """The next claim's answer, or None when this turn waited (or the claim failed)."""
        s, outage = self.state, self.c._outage
        at_once, s.probe_now = s.probe_now, False
        if s.behind is not None:
            (asked, got), s.behind = s.behind, None
            return Turn(asked, got, probing=False)
        probing = False
        if s.lost is not None:
            (asked, claim_id), s.lost = s.lost, None
        else:
            claim_id = None
            if outage.active:
                if s.epoch != outage.epoch:
                    s.epoch = outage.epoch
                    self.probes.reset()
                if not await self.await_dependency(at_once=at_once):
                    return None
                probing = True
            room = await self.room()
            if room is None:
                return None
            asked = 1 if probing else self.claim_size(room)
        answer = await self.send(asked, claim_id, probing)
        return None if answer is None else Turn(asked, answer, probing)

    async def room(self) -> int | None:
        """Free room to claim into; None after waiting for some (or for a suspect)."""
        c = self.c
        room, hold = self.free_room(), self.suspect_hold()
        if room > 0 and hold is None:
            return room
        c._room.clear()
        if hold is None:
            await c._until(c._room.wait())
        else:
            await wait_any(hold, c._room, c._stopping)
        return None

    async def send(self, asked: int, claim_id: str | None, probing: bool) -> ClaimBatch | None:
        c, s = self.c, self.state
        c._kick.clear()
        try:
            if s.unsure:
                await c._release_orphans()
                s.unsure = False
            # The job that began the wait is the probe only when alone: ask for one more.
            spare = 1 if probing and c._outage.tripped_by else 0
            got = await c._claim(asked + spare, claim_id)
            self.backoff.reset()
            self.trouble.ok()
        except Exception as e:  # noqa: BLE001 - any error: the claimer must go on
            self.trouble.note(e)
            s.unsure = True
            if isinstance(e, (RedisTimeoutError, asyncio.TimeoutError)) and asked > 1:
                # A reply too large to read in time would time out again, on the same jobs.
                s.batch_now = max(1, asked // 2)
                log.info(
                    "a claim of %d jobs timed out; claiming at most %d at a time",
                    asked,
                    s.batch_now,
                )
            await c._until(self.backoff.sleep())
            return None
        return got

    async def take(self, turn: Turn) -> None:
        """Hand out what a claim brought, then park if the queue looks drained."""
        c, s = self.c, self.state
        got, asked = turn.got, turn.asked
        if len(got.claims) == asked == s.batch_now < c.options.batch:
            s.batch_now += 1
        if got.claims:
            c._heartbeat.busy.set()
            s.careful = any(claim.stalls for claim in got.claims)
            await c._hooks.claimed(got.claims)
        if c._outage.active and not turn.probing:
            for claim in got.claims:  # claimed as the outage began: all back, untouched
                c._tracker.hold(claim)
                c._chore(c._hand_back_unstarted(claim))
            return
        if turn.probing:
            got = self.one_probe(got)
        kept, extra = split_suspects(got.claims)
        if extra:
            # Before the kept ones start: one may kill this process, releases in flight too.
            s.unsure = await c._outcomes.release_suspects(extra) or s.unsure
        for claim in kept:
            c._tracker.hold(claim)
            c._ready.put_nowait(claim)
        if not extra and len(got.claims) < asked:
            await self.park(got, turn.probing)

    async def park(self, got: ClaimBatch, probing: bool) -> None:
        """Park with the next claim behind it, unless it must be a probe or has no room."""
        s = self.state
        await asyncio.sleep(0)  # the slots start what this claim brought first
        room = self.free_room()
        ride = not probing and room > 0 and self.suspect_hold() is None
        count = self.claim_size(room) if ride else 0
        claim_id = mint_claim_id() if ride else None
        woken = await self.park_until_woken(got, count, claim_id)
        if woken.reply is not None:
            s.behind = (count, decode_batch(woken.reply, self.c.queue.jobs))
        elif woken.lost:
            s.lost = (count, claim_id)
        s.probe_now = probing and not got.claims

    def free_room(self) -> int:
        """Free slots and prefetch, plus up to ``concurrency`` jobs awaiting a verdict."""
        c, o = self.c, self.c.options
        return o.concurrency + o.prefetch - len(c._tracker) + min(c._completing, o.concurrency)

    def claim_size(self, room: int) -> int:
        return 1 if self.state.careful else min(room, self.state.batch_now)

    def suspect_hold(self) -> float | None:
        """Seconds left holding off for the suspects held (at most ``suspect_ms`` each)."""
        c = self.c
        now = asyncio.get_running_loop().time()
        hold: float | None = None
        for record in c._tracker:
            if not record.claim.stalls or c._tracker.is_lost(key_of(record.claim)):
                continue
            left = (record.started or now) + c.options.suspect_ms / 1000 - now
            if left > 0:
                hold = left if hold is None else max(hold, left)
        return hold

    async def park_until_woken(self, got: ClaimBatch, count: int, claim_id: str | None) -> Woken:
        c, o = self.c, self.c.options
        timeout_ms = o.park_max_ms
        if got.next_due_ms is not None:
            timeout_ms = min(timeout_ms, max(10, got.next_due_ms - got.server_now_ms))
        claim = c._side.claim_call(o.worker_id, o.lease_ms, count, claim_id) if count else None
        return await c._park.wait(timeout_ms, c._kick, claim)

    async def await_dependency(self, *, at_once: bool = False) -> bool:
        """While a dependency is down: True when one job may be claimed as the probe, False
        to look again. ``at_once``: the park since the last probe claim was the pause."""
        c, outage = self.c, self.c._outage
        if c.probe is not None:
            await self.probe_pause()
            if not outage.active or c._stopping.is_set():
                return False
            epoch = outage.epoch
            try:
                if not await c._until(c.probe()):
                    return False
            except Exception as e:  # noqa: BLE001 - still down, whatever it says
                log.debug("probe: still unavailable (%s: %s)", type(e).__name__, e)
                return False
            if epoch == outage.epoch:
                c._resume("the probe answered")
            return False
        now = asyncio.get_running_loop().time()
        if any((r.started or now) >= outage.since for r in c._tracker):
            # A job taken since the wait began is the probe (older ones may hang).
            c._room.clear()
            await c._until(c._room.wait(), outage.resumed)
            return False
        if not at_once:
            await self.probe_pause()
        return outage.active and not c._stopping.is_set()

    async def probe_pause(self) -> None:
        pause = self.probes.next_delay() * random.uniform(0.5, 1.0)
        await self.c._until(asyncio.sleep(pause), self.c._outage.resumed)

    def one_probe(self, got: ClaimBatch) -> ClaimBatch:
        """A probe claim's first job but the one that began the wait; the rest go back."""
        c = self.c
        if len(got.claims) < 2:
            return got
        tripped = c._outage.tripped_by
        probe = next((claim for claim in got.claims if claim.job_id != tripped), got.claims[0])
        for claim in got.claims:
            if claim is not probe:
                c._tracker.hold(claim)
                c._chore(c._give_back(claim))
        return replace(got, claims=[probe])
