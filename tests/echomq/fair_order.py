"""A pure model of the lanes' fair order (``lua/lane_claim.lua`` and ``place()`` in
``lua/include/common.lua``), for the tests that compare it with the real scripts and prove
its bounds over long runs.

``new``, ``ring`` and ``owed`` mirror the keys of the same names. A job arriving on an empty
lane activates it (the lane joins ``new``). A claim serves ``new`` first, except that the
claim right after one that served ``new`` serves the ring if the ring has a lane; the lane
served gives its oldest job and, if it still has jobs, joins the ring's tail.

:class:`Bounds` checks, claim by claim, the two bounds ``docs/load.md`` proves:

1. a lane that joins the ring at position p is claimed within its next 2p claims, and p is
   at most the number of non-empty lanes at that moment;
2. a lane activated at position q of ``new`` (q - 1 activations ahead of it) is claimed
   within its next 2q claims;

and the invariant that each non-empty lane is in exactly one of the two lists, once, and no
empty lane is in either.
"""

from __future__ import annotations

import heapq
from bisect import insort
from dataclasses import dataclass, field


@dataclass
class FairOrder:
    """Which lane serves the next claim: the two lists and the turn flag, nothing else."""

    new: list[str] = field(default_factory=list)
    ring: list[str] = field(default_factory=list)
    owed: bool = False  # the last claim served ``new``: the ring goes next if it has a lane

    def activate(self, lane: str) -> None:
        """A job arrived on ``lane`` while it was empty."""
        self.new.append(lane)

    def take(self) -> str | None:
        """Pop the lane the next claim serves (None: every lane is empty)."""
        if self.new and not (self.owed and self.ring):
            self.owed = True
            return self.new.pop(0)
        if self.ring:
            self.owed = False
            return self.ring.pop(0)
        return None

    def served(self, lane: str, still_nonempty: bool) -> None:
        """After ``lane`` gave a job: back to the ring's tail if it has more."""
        if still_nonempty:
            self.ring.append(lane)


@dataclass
class FairLanes:
    """The order plus each lane's waiting jobs (ids pop smallest first, as ZPOPMIN does on
    a score-0 set), with an optional bounds checker watching every move."""

    order: FairOrder = field(default_factory=FairOrder)
    lanes: dict[str, list[str]] = field(default_factory=dict)
    bounds: Bounds | None = None

    def place(self, lane: str, job_id: str) -> None:
        """An enqueue, or a job coming back (released, reaped, promoted, revived)."""
        waiting = self.lanes.setdefault(lane, [])
        insort(waiting, job_id)
        if len(waiting) == 1:
            self.order.activate(lane)
            if self.bounds:
                self.bounds.activated(self, lane)

    def claim(self) -> tuple[str, str] | None:
        """One claim step: (lane, job id), or None when every lane is empty."""
        lane = self.order.take()
        if lane is None:
            return None
        waiting = self.lanes[lane]
        job_id = waiting.pop(0)
        if not waiting:
            del self.lanes[lane]  # only non-empty lanes are kept
        self.order.served(lane, bool(waiting))
        if self.bounds:
            self.bounds.claimed(self, lane)
        return lane, job_id

    def nonempty(self) -> set[str]:
        return set(self.lanes)


@dataclass
class Bounds:
    """Deadlines, in claims, by which each listed lane must be claimed; checked each claim.
    The full invariant (O(lanes)) is checked while there are few lanes, and every
    ``full_every`` claims in long runs; the lane that moved is checked at every claim."""

    claims: int = 0
    full_every: int = 101
    due: dict[str, int] = field(default_factory=dict)  # lane -> claim count it is due by
    ring_waits: list[tuple[int, int]] = field(default_factory=list)  # (claims waited, p)
    new_waits: list[tuple[int, int]] = field(default_factory=list)  # (claims waited, q)
    _since: dict[str, tuple[int, int, bool]] = field(default_factory=dict)
    _heap: list[tuple[int, str]] = field(default_factory=list)  # (due, lane), lazily pruned

    def _set_due(self, lane: str, by: int, pos: int, fresh: bool) -> None:
        self.due[lane] = by
        self._since[lane] = (self.claims, pos, fresh)
        heapq.heappush(self._heap, (by, lane))

    def activated(self, lanes: FairLanes, lane: str) -> None:
        q = len(lanes.order.new)
        assert lanes.order.new[-1] == lane and lane not in self.due
        self._set_due(lane, self.claims + 2 * q, q, True)
        self.check(lanes)

    def claimed(self, lanes: FairLanes, lane: str) -> None:
        self.claims += 1
        assert self.claims <= self.due.pop(lane), f"{lane} claimed after its deadline"
        at, pos, fresh = self._since.pop(lane)
        (self.new_waits if fresh else self.ring_waits).append((self.claims - at, pos))
        if lane in lanes.lanes:  # it kept jobs: it joined the ring's tail
            p = len(lanes.order.ring)
            assert lanes.order.ring[-1] == lane and p <= len(lanes.lanes)
            self._set_due(lane, self.claims + 2 * p, p, False)
        else:
            assert lane not in lanes.order.ring[-1:]
        while self._heap and self.due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # a deadline already met
        assert not self._heap or self._heap[0][0] > self.claims, (
            f"{self._heap[0][1]} is past its deadline and still unclaimed"
        )
        self.check(lanes)

    def check(self, lanes: FairLanes) -> None:
        if len(lanes.lanes) <= 50 or self.claims % self.full_every == 0:
            self.invariant(lanes)
            assert set(self.due) == lanes.nonempty()

    @staticmethod
    def invariant(lanes: FairLanes) -> None:
        """Each non-empty lane in exactly one of the two lists, once; no empty lane."""
        new, ring = lanes.order.new, lanes.order.ring
        assert len(set(new)) == len(new) and len(set(ring)) == len(ring)
        assert not set(new) & set(ring)
        assert set(new) | set(ring) == lanes.nonempty()
