"""The load script's pure parts: the honest player's solver, the ledger's dedupe, the
verdict's leaderboard rule and chaos's choice of victim."""

from __future__ import annotations

import random
from typing import Any

from codemojex.mash.chaos import pick_victim
from codemojex.mash.ledger import Ledger, percentile
from codemojex.mash.solver import Solver
from codemojex.mash.verdict import Verdict, _compare_board
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
    return {"type": "score", "event_id": event_id, "job_id": job_id, "round_id": "RND_1",
            "player_id": "PLR_1", "seq": 0, "guess": ["a"], "exact": exact, "near": 0,
            "solved": False, "points": 0}


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


def test_the_leaderboard_check_tells_extra_points_from_missing_ones() -> None:
    v = Verdict()
    board = [{"player_id": "A", "points": 200}, {"player_id": "B", "points": 50}]
    _compare_board(v, board, {"A": 100, "B": 50, "C": 0}, "all-time")
    assert (v.doubled, v.lost) == (1, 0)  # A counted twice; C (0 points) may be absent
    _compare_board(v, board, {"D": 10}, "all-time")
    assert v.lost == 1  # D earned points the board does not show


def test_chaos_aims_at_the_freshest_scoring_worker_not_yet_killed() -> None:
    workers = [
        {"worker_id": "W1", "alive": True, "state": "scoring", "job_id": "J1",
         "lease_remaining_ms": 9000},
        {"worker_id": "W2", "alive": True, "state": "scoring", "job_id": "J2",
         "lease_remaining_ms": 9500},
        {"worker_id": "W3", "alive": True, "state": "scoring", "job_id": "J3",
         "lease_remaining_ms": None},  # its reported job is done: stale heartbeat
        {"worker_id": "W4", "alive": True, "state": "idle", "job_id": None,
         "lease_remaining_ms": None},
    ]
    seen = {"J1": 2.0, "J2": 1.0, "J3": 3.0}
    assert pick_victim(workers, seen, set())["worker_id"] == "W1"  # type: ignore[index]
    assert pick_victim(workers, seen, {"W1"})["worker_id"] == "W2"  # type: ignore[index]
    assert pick_victim(workers, seen, {"W1", "W2"}) is None
