"""The load script's pure parts: the honest player's solver, the ledger's dedupe, the
verdict's leaderboard rule and chaos's choice of victim."""

from __future__ import annotations

import random
from typing import Any

from codemojex.mash.chaos import Kill, pick_victim
from codemojex.mash.ledger import Ledger, percentile
from codemojex.mash.solver import Solver
from codemojex.mash.verdict import Verdict, _check_kills, _compare_board
from codemojex.rules import DEFAULT_PALETTE, feedback


def test_the_honest_solver_cracks_every_secret_in_a_few_guesses() -> None:
    rng = random.Random(7)
    counts = []
    for _ in range(200):
        secret = [rng.choice(DEFAULT_PALETTE) for _ in range(4)]
        solver = Solver(DEFAULT_PALETTE, 4, rng)
        while not solver.solved:
            guess = solver.next_guess()
            fb = feedback(secret, guess)
            solver.learn(guess, fb.exact, fb.near)
            assert solver.remaining >= 1  # the secret is always still a candidate
        counts.append(solver.guesses)
    assert max(counts) <= 10
    assert sum(counts) / len(counts) < 6.5


def _score(job_id: str, exact: int = 1, event_id: str = "1-0") -> dict[str, Any]:
    return {
        "type": "score",
        "event_id": event_id,
        "job_id": job_id,
        "round_id": "RND_1",
        "player_id": "PLR_1",
        "seq": 0,
        "guess": ["a"],
        "exact": exact,
        "near": 0,
        "solved": False,
        "points": 0,
    }


def test_a_replayed_score_counts_once_and_a_different_one_twice() -> None:
    led = Ledger()
    led.accept("JOB_1", "PLR_1", "honest", "RND_1", 0, ["a"])
    led.deliver(_score("JOB_1"))
    led.deliver(_score("JOB_1", event_id="1-0"))  # the same score, resent on a new socket
    assert (len(led.guesses["JOB_1"].scores), led.guesses["JOB_1"].messages) == (1, 2)
    led.deliver(_score("JOB_1", exact=2, event_id="2-0"))  # a second, different score
    assert len(led.guesses["JOB_1"].scores) == 2
    assert led.scored == 1 and led.in_flight == 0


def test_a_score_that_overtakes_its_202_is_kept_for_it() -> None:
    led = Ledger()
    led.deliver(_score("JOB_2"))
    assert led.unsolicited == 1 and led.scored == 0
    led.accept("JOB_2", "PLR_1", "masher", "RND_1", 0, ["a"])
    assert led.unsolicited == 0 and led.scored == 1
    assert led.guesses["JOB_2"].latency == 0.0


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    # 7 / 100 * 100 is 7.000000000000001 in floats: the 7th of 100 values, not the 8th.
    assert percentile([float(i) for i in range(1, 101)], 7) == 7.0
    assert percentile([5.0, 1.0], 0) == 1.0 and percentile([5.0, 1.0], 100) == 5.0


def test_the_leaderboard_check_tells_extra_points_from_missing_ones() -> None:
    v = Verdict()
    board = [{"player_id": "A", "points": 200}, {"player_id": "B", "points": 50}]
    _compare_board(v, board, {"A": 100, "B": 50, "C": 0}, "all-time")
    assert (v.doubled, v.lost) == (1, 0)  # A counted twice; C (0 points) may be absent
    _compare_board(v, board, {"D": 10}, "all-time")
    assert v.lost == 1  # D earned points the board does not show


def test_chaos_aims_at_the_scoring_worker_with_most_lease_left_not_yet_killed() -> None:
    workers = [
        {
            "worker_id": "W1",
            "alive": True,
            "state": "scoring",
            "job_id": "J1",
            "lease_remaining_ms": 9000,
        },
        {
            "worker_id": "W2",
            "alive": True,
            "state": "scoring",
            "job_id": "J2",
            "lease_remaining_ms": 9500,
        },
        {
            "worker_id": "W3",
            "alive": True,
            "state": "scoring",
            "job_id": "J3",
            "lease_remaining_ms": None,
        },  # its reported job is done: stale heartbeat
        {
            "worker_id": "W4",
            "alive": True,
            "state": "idle",
            "job_id": None,
            "lease_remaining_ms": None,
        },
        {
            "worker_id": "W5",
            "alive": False,
            "state": "dead",
            "job_id": None,
            "lease_remaining_ms": None,
        },
    ]
    assert pick_victim(workers, set())["worker_id"] == "W2"  # type: ignore[index]
    assert pick_victim(workers, {"W2"})["worker_id"] == "W1"  # type: ignore[index]
    assert pick_victim(workers, {"W1", "W2"}) is None


def _kill(held: list[str] | None, job_id: str | None = "J1") -> Kill:
    return Kill(at=1.0, worker_id="W1", job_id=job_id, lease_remaining_ms=9000, held=held)


def _view(attempts: int, scored: bool = True) -> dict[str, object]:
    return {
        "state": "completed",
        "attempts": attempts,
        "score": {"exact": 1, "near": 0, "solved": False} if scored else None,
    }


def test_a_kill_is_judged_by_what_the_worker_held_as_it_died() -> None:
    views = {"J1": _view(2), "J2": _view(1), "J3": _view(3)}
    v = Verdict()
    _check_kills(v, [_kill(["J1"]), _kill(["J1", "J3"]), _kill([])], views)
    assert (v.kills, v.rescued, v.missed_kills, v.doubled) == (3, 2, 1, 0)
    # Held at death yet completed on the first attempt: the dead worker completed it.
    v = Verdict()
    _check_kills(v, [_kill(["J2"])], views)
    assert (v.rescued, v.missed_kills, v.doubled, v.ok) == (0, 1, 1, False)
    # Nothing written down: the admin view's job stands in, and a first-attempt score
    # there only means the kill came late.
    v = Verdict()
    _check_kills(v, [_kill(None, "J2"), _kill(None, "J1"), _kill(None, None)], views)
    assert (v.rescued, v.missed_kills, v.doubled) == (1, 2, 0)
