"""The claim tracker (echomq.consumer.claims): one record and one state per held claim, moved only
along the legal transitions; pure, no server."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from echomq.consumer.claims import (
    FINISHING,
    LEGAL,
    LOST,
    READY,
    RUNNING,
    STUCK,
    ClaimState,
    ClaimTracker,
    IllegalTransition,
    Key,
    key_of,
    split_suspects,
)
from echomq.types import Claim, Token


def claim(job: str, token: int = 1, stalls: int = 0) -> Claim:
    return Claim(job, "lane", {}, Token(token, ""), 0, stalls=stalls)


def test_a_claim_is_held_ready_then_runs_finishes_and_is_forgotten() -> None:
    t = ClaimTracker()

    async def main() -> None:
        c = claim("J1")
        record = t.hold(c)
        assert record.state is READY and len(t) == 1 and t.claims() == [c]
        task = asyncio.ensure_future(asyncio.sleep(0))
        assert t.start(key_of(c), 5.0, task) is record
        assert record.state is RUNNING and record.started == 5.0
        assert t.running() == [record]  # started, not returned yet
        await task
        assert t.running() == []
        t.finish(key_of(c))
        assert record.state is FINISHING and t.renewable() == []  # its outcome is on its way
        t.forget(key_of(c))
        assert len(t) == 0 and t.get(key_of(c)) is None and t.is_lost(key_of(c))

    asyncio.run(main())


def test_the_same_job_under_a_new_token_is_another_claim() -> None:
    t = ClaimTracker()
    old, new = t.hold(claim("J", 1)), t.hold(claim("J", 2))
    assert t.lose(key_of(old.claim)) is old
    assert old.state is LOST and new.state is READY and not t.is_lost(key_of(new.claim))


def test_a_stuck_outcome_is_given_up_a_lease_after_its_first_error() -> None:
    t = ClaimTracker()
    r = t.hold(claim("J"))
    t.finish(key_of(r.claim))
    assert not t.give_up(key_of(r.claim), now=10.0, lease_s=2.0)
    assert r.state is STUCK and r.give_up_at == 12.0
    assert t.renewable() == [r]  # the lease keeper renews a stuck outcome's lease
    assert not t.give_up(key_of(r.claim), now=11.9, lease_s=2.0)  # the first error counts
    assert r.give_up_at == 12.0  # later errors do not move it, nor do renewals
    assert t.give_up(key_of(r.claim), now=12.0, lease_s=2.0)
    t.settled(key_of(r.claim))
    assert r.state is FINISHING and r.give_up_at is None


def test_an_outcome_of_a_claim_no_longer_held_is_given_up_at_once() -> None:
    assert ClaimTracker().give_up(("J", 1, ""), now=0.0, lease_s=10.0)


def test_a_lost_claim_stays_lost() -> None:
    t = ClaimTracker()
    r = t.hold(claim("J"))
    t.lose(key_of(r.claim))
    t.finish(key_of(r.claim))  # its hand-back will be stale: it stays lost
    assert r.state is LOST
    assert t.renewable() == [r]
    with pytest.raises(IllegalTransition, match="lost -> running"):
        t.start(key_of(r.claim), 0.0, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", list(ClaimState))
def test_every_illegal_move_is_refused(state: ClaimState) -> None:
    t = ClaimTracker()
    r = t.hold(claim("J"))
    r.state = state
    for to in ClaimState:
        if to in LEGAL[state]:
            continue
        with pytest.raises(IllegalTransition):
            t.move(r, to)
        assert r.state is state


def test_lost_is_terminal_and_reachable_from_every_other_state() -> None:
    assert LEGAL[LOST] == frozenset()
    assert all(LOST in LEGAL[s] for s in ClaimState if s is not LOST)


def test_a_batch_keeps_one_suspect_and_every_clean_job() -> None:
    a, b, c, d = claim("A"), claim("B", stalls=1), claim("C"), claim("D", stalls=2)
    assert split_suspects([a, b, c, d]) == ([a, b, c], [d])
    assert split_suspects([]) == ([], [])


@given(st.lists(st.integers(min_value=0, max_value=2), max_size=20))
def test_split_keeps_order_and_at_most_one_suspect(stalls: list[int]) -> None:
    claims = [claim(f"J{i}", stalls=s) for i, s in enumerate(stalls)]
    kept, extra = split_suspects(claims)
    assert sorted(kept + extra, key=claims.index) == claims
    assert [c for c in claims if c in kept] == kept
    assert sum(1 for c in kept if c.stalls) == min(1, sum(1 for s in stalls if s))
    assert all(c.stalls for c in extra)


class TrackerMachine(RuleBasedStateMachine):
    """Any sequence of the tracker's operations keeps every claim on a legal path, and the
    tracker's views (renewable, running, is_lost) agree with the states."""

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.t = ClaimTracker()
        self.loop = asyncio.new_event_loop()
        self.next = 0
        self.history: dict[Key, list[ClaimState]] = {}

    def teardown(self) -> None:
        self.loop.close()

    def _note(self, key: Key) -> None:
        record = self.t.get(key)
        if record is not None and self.history[key][-1] is not record.state:
            self.history[key].append(record.state)

    @rule(target=keys)
    def hold(self) -> Key:
        self.next += 1
        c = claim(f"J{self.next}", self.next)
        self.t.hold(c)
        self.history[key_of(c)] = [READY]
        return key_of(c)

    @rule(key=keys)
    def start(self, key: Key) -> None:
        record = self.t.get(key)
        if record is None or record.state is not READY:
            with pytest.raises((IllegalTransition, KeyError)):
                self.t.start(key, 1.0, self.loop.create_future())  # type: ignore[arg-type]
            return
        self.t.start(key, 1.0, self.loop.create_future())  # type: ignore[arg-type]
        self._note(key)

    @rule(key=keys)
    def finish(self, key: Key) -> None:
        self.t.finish(key)
        self._note(key)

    @rule(key=keys)
    def lose(self, key: Key) -> None:
        self.t.lose(key)
        self._note(key)

    @rule(key=keys, now=st.floats(0, 100))
    def give_up(self, key: Key, now: float) -> None:
        self.t.give_up(key, now, 1.0)
        self._note(key)

    @rule(key=keys)
    def settled(self, key: Key) -> None:
        self.t.settled(key)
        self._note(key)

    @rule(key=keys)
    def forget(self, key: Key) -> None:
        self.t.forget(key)

    @invariant()
    def every_path_is_legal(self) -> None:
        for path in self.history.values():
            for a, b in itertools.pairwise(path):
                assert b in LEGAL[a], path

    @invariant()
    def views_agree_with_states(self) -> None:
        records = list(self.t)
        assert sorted(r.claim.job_id for r in self.t.renewable()) == sorted(
            r.claim.job_id for r in records if r.state is not FINISHING
        )
        for r in records:
            assert self.t.is_lost(key_of(r.claim)) == (r.state is LOST)
            assert (r.state is STUCK) <= (r.give_up_at is not None)
            assert (r.state is RUNNING) <= (r.task is not None)


TestTrackerMachine = TrackerMachine.TestCase
