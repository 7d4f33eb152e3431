"""The one backoff every retry loop uses: doubling from ``first``, capped, jittered."""

from __future__ import annotations

import pytest

from echomq.backoff import Backoff


def test_without_jitter_it_doubles_from_first_and_holds_at_the_cap() -> None:
    b = Backoff(first=0.1, cap=1.0, jitter=False)
    assert [b.next_delay() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next_delay() == 0.1


def test_full_jitter_stays_below_the_same_ceilings_and_spreads() -> None:
    draws = []
    for _ in range(200):
        b = Backoff(first=0.1, cap=1.0)
        draws.append([b.next_delay() for _ in range(6)])
    for n, ceiling in enumerate([0.1, 0.2, 0.4, 0.8, 1.0, 1.0]):
        column = [d[n] for d in draws]
        assert all(0 <= x <= ceiling for x in column)
        assert max(column) > ceiling / 2 and min(column) < ceiling / 2  # spread, not fixed


@pytest.mark.parametrize(("first", "cap"), [(0, 1), (-1, 1), (2, 1)])
def test_nonsense_bounds_are_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError):
        Backoff(first=first, cap=cap)
