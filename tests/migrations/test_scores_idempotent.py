"""Exactly-once scoring on the durable floor, on SQLite and PostgreSQL.

A score is keyed on its JOB id: recording it again — a retry, a zombie, a concurrent
duplicate — changes nothing, and the standings depend only on which guesses were scored,
never on the order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from codemojex import rules
from codemojex.store import (
    Death,
    Round,
    ScoreRecord,
    create_player,
    delete_dead,
    get_dead,
    get_player,
    get_round,
    hash_token,
    latest_round,
    leaderboard,
    list_dead,
    make_engine,
    mark_dead_retried,
    migrate,
    player_by_token_hash,
    player_names,
    record_score,
    round_solvers,
    save_round,
    score_by_job,
    scores_for,
    sqlite_url,
    upsert_dead,
    upsert_dead_many,
)
from codemojex.store.models import (
    DeadJobRow,
    PlayerRow,
    RoundPointsRow,
    RoundRow,
    ScoreRow,
    TotalRow,
)

T = TypeVar("T")
SECRET = ("🍎", "🍌", "🍇", "🍒")
MISS = ("🍑", "🍑", "🍑", "🍑")


# --- helpers --------------------------------------------------------------------------


async def _seed(engine: AsyncEngine, players: Sequence[str], rounds: Sequence[str]) -> None:
    for i, pid in enumerate(players):
        await create_player(engine, f"p{i}", hash_token(pid), 1_000 + i, player_id=pid)
    for i, rid in enumerate(rounds):
        await save_round(
            engine,
            Round(rid, 4, rules.DEFAULT_PALETTE, SECRET, 10_000 * i, 10_000 * (i + 1)),
        )


def _score(
    job_id: str,
    player_id: str,
    seq: int,
    solved: bool,
    accepted_at_ms: int,
    round_id: str = "RND_0",
    *,
    attempts: int = 1,
    worker_id: str = "WRK_A",
) -> ScoreRecord:
    guess = SECRET if solved else MISS
    fb = rules.feedback(SECRET, guess)
    return ScoreRecord(
        job_id=job_id,
        round_id=round_id,
        player_id=player_id,
        seq=seq,
        guess=guess,
        exact=fb.exact,
        near=fb.near,
        solved=fb.solved,
        points=rules.points_for(seq, fb.solved),
        accepted_at_ms=accepted_at_ms,
        scored_at_ms=accepted_at_ms + 5,
        attempts=attempts,
        worker_id=worker_id,
    )


async def _count(engine: AsyncEngine, table: Any) -> int:
    async with engine.connect() as conn:
        return len((await conn.execute(select(table))).all())


async def _rows(engine: AsyncEngine, table: Any, *order: Any) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        return [tuple(r) for r in await conn.execute(select(table).order_by(*order))]


async def _snapshot(engine: AsyncEngine, rounds: Sequence[str]) -> dict[str, Any]:
    """Everything scoring order must not change."""
    return {
        "leaderboard": await leaderboard(engine),
        "per_round": {r: await leaderboard(engine, round_id=r) for r in rounds},
        "solvers": {r: await round_solvers(engine, r) for r in rounds},
        "round_points": await _rows(
            engine, RoundPointsRow, RoundPointsRow.player_id, RoundPointsRow.round_id
        ),
        "totals": await _rows(engine, TotalRow, TotalRow.player_id),
        "scores": await _count(engine, ScoreRow),
    }


async def _wipe(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        for table in (ScoreRow, RoundPointsRow, TotalRow, DeadJobRow, RoundRow, PlayerRow):
            await conn.execute(delete(table))


def _no_fsync(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous = OFF")
    cursor.close()


def _run_in_thread(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a private loop in a helper thread (for sync Hypothesis tests)."""

    async def main() -> T:
        return await fn()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result(timeout=60)


# --- a scenario: accepted guesses of several players in several rounds ------------------


@dataclasses.dataclass(frozen=True)
class Scenario:
    players: tuple[str, ...]
    rounds: tuple[str, ...]
    scores: tuple[ScoreRecord, ...]  # one per accepted guess

    def expected_leaderboard(self) -> list[dict[str, Any]]:
        """The all-time leaderboard, computed from the rules alone."""
        board = []
        for i, pid in enumerate(self.players):
            per_round = []
            for rid in self.rounds:
                mine = [s for s in self.scores if s.player_id == pid and s.round_id == rid]
                if mine:
                    best = min(mine, key=lambda s: (-s.points, s.seq, s.job_id))
                    assert best.points == rules.round_points((s.seq, s.solved) for s in mine)
                    per_round.append(best)
            if not per_round:
                continue
            paid = [b for b in per_round if b.points > 0]
            reached = (
                max(b.accepted_at_ms for b in paid)
                if paid
                else min(b.accepted_at_ms for b in per_round)
            )
            points = sum(b.points for b in per_round)
            board.append((-points, reached, pid, f"p{i}", len(paid)))
        return [
            {"player_id": pid, "name": name, "points": -neg, "solved_rounds": solved}
            for neg, _, pid, name, solved in sorted(board)
        ]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    players = tuple(f"PLR_{i}" for i in range(draw(st.integers(1, 3))))
    rounds = tuple(f"RND_{i}" for i in range(draw(st.integers(1, 2))))
    scores = []
    for r, rid in enumerate(rounds):
        for p, pid in enumerate(players):
            n = draw(st.integers(0, 13))  # up to seq 12: past the 10-point floor
            solved = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            # Coarse times so players tie on acceptance time now and then.
            times = sorted(draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)))
            for seq in range(n):
                job = f"JOB_{r}{p}{seq:02d}"
                at = 10_000 * r + 100 * times[seq] + seq
                scores.append(_score(job, pid, seq, solved[seq], at, rid))
    return Scenario(players, rounds, tuple(scores))


def _deliveries(scenario: Scenario, rnd: random.Random) -> list[ScoreRecord]:
    """Every accepted guess once, some again (retries, zombies), in a shuffled order."""
    again = [
        dataclasses.replace(s, attempts=s.attempts + 1, worker_id="WRK_B", scored_at_ms=9)
        for s in scenario.scores
        if rnd.random() < 0.3
    ]
    deliveries = list(scenario.scores) + again
    rnd.shuffle(deliveries)
    return deliveries


async def _play(engine: AsyncEngine, scenario: Scenario, deliveries: Sequence[ScoreRecord]) -> Any:
    await _wipe(engine)
    await _seed(engine, scenario.players, scenario.rounds)
    wrote = [await record_score(engine, s) for s in deliveries]
    assert sum(wrote) == len(scenario.scores)
    return await _snapshot(engine, scenario.rounds)


@pytest.fixture(scope="module")
def sqlite_file_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = sqlite_url(tmp_path_factory.mktemp("order"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(migrate, url).result(timeout=60)
    return url


@st.composite
def deliveries(draw: st.DrawFn, scenario: Scenario) -> list[ScoreRecord]:
    """Every accepted guess once, some again (retries, zombies), in any order."""
    again = draw(st.lists(st.sampled_from(scenario.scores), max_size=8)) if scenario.scores else []
    redelivered = [
        dataclasses.replace(s, attempts=s.attempts + 1, worker_id="WRK_B", scored_at_ms=9)
        for s in again
    ]
    return draw(st.permutations(list(scenario.scores) + redelivered))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), scenario=scenarios())
def test_standings_do_not_depend_on_scoring_order_or_retries(
    sqlite_file_url: str, data: st.DataObject, scenario: Scenario
) -> None:
    orders = [data.draw(deliveries(scenario), label=f"order {i}") for i in range(2)]

    async def run() -> list[Any]:
        engine = make_engine(sqlite_file_url)
        # Hundreds of commits per example: skip the fsyncs, durability is not under test.
        event.listen(engine.sync_engine, "connect", _no_fsync)
        try:
            canonical = await _play(engine, scenario, scenario.scores)
            shuffled = [await _play(engine, scenario, order) for order in orders]
        finally:
            await engine.dispose()
        return [canonical, *shuffled]

    canonical, *others = _run_in_thread(run)
    assert canonical["leaderboard"] == scenario.expected_leaderboard()
    for other in others:
        assert other == canonical


@pytest.mark.parametrize("seed", [1, 2])
async def test_standings_do_not_depend_on_scoring_order_fixed_cases(
    engine: AsyncEngine, seed: int
) -> None:
    scenario = _fixed_scenario(seed)
    canonical = await _play(engine, scenario, scenario.scores)
    assert canonical["leaderboard"] == scenario.expected_leaderboard()
    assert await _play(engine, scenario, list(reversed(scenario.scores))) == canonical
    assert await _play(engine, scenario, _deliveries(scenario, random.Random(seed))) == canonical


def _fixed_scenario(seed: int) -> Scenario:
    rnd = random.Random(seed)
    players, rounds = ("PLR_a", "PLR_b", "PLR_c"), ("RND_0", "RND_1")
    scores = []
    for r, rid in enumerate(rounds):
        for p, pid in enumerate(players):
            at = 10_000 * r
            for seq in range(rnd.randint(0, 12)):
                at += rnd.randint(0, 300)
                solved = rnd.random() < 0.3
                scores.append(_score(f"JOB_{r}{p}{seq:02d}", pid, seq, solved, at, rid))
    return Scenario(players, rounds, tuple(scores))


# --- idempotency ----------------------------------------------------------------------


async def test_recording_a_score_twice_writes_it_once(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0"])
    score = _score("JOB_1", "PLR_a", 2, True, 500)
    assert await record_score(engine, score) is True
    zombie = dataclasses.replace(score, attempts=2, worker_id="WRK_B", scored_at_ms=999)
    assert await record_score(engine, zombie) is False
    assert await record_score(engine, score) is False

    assert await _count(engine, ScoreRow) == 1
    assert await score_by_job(engine, "JOB_1") == score  # the first write stands
    assert await leaderboard(engine) == [
        {"player_id": "PLR_a", "name": "p0", "points": 90, "solved_rounds": 1}
    ]


async def test_concurrent_duplicates_are_written_once(
    engine: AsyncEngine, database_url: str
) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0"])
    other = make_engine(database_url)  # a second "worker", with its own connections
    try:
        score = _score("JOB_1", "PLR_a", 0, True, 500)
        results = await asyncio.gather(
            *(record_score(e, dataclasses.replace(score, attempts=i)) for i, e in
              enumerate([engine, other] * 4, start=1))
        )  # fmt: skip
    finally:
        await other.dispose()
    assert sorted(results) == [False] * 7 + [True]
    assert await _count(engine, ScoreRow) == 1
    assert await leaderboard(engine) == [
        {"player_id": "PLR_a", "name": "p0", "points": 110, "solved_rounds": 1}
    ]


async def test_concurrent_scores_of_one_player_are_all_counted(
    engine: AsyncEngine, database_url: str
) -> None:
    # Different rounds of one player at once: neither totals update may be lost.
    rounds = [f"RND_{i}" for i in range(6)]
    await _seed(engine, ["PLR_a"], rounds)
    other = make_engine(database_url)
    try:
        scores = [_score(f"JOB_{i}", "PLR_a", i, True, 100 + i, rid) for i, rid in
                  enumerate(rounds)]  # fmt: skip
        results = await asyncio.gather(
            *(record_score(engine if i % 2 else other, s) for i, s in enumerate(scores))
        )
    finally:
        await other.dispose()
    assert all(results)
    expected = sum(rules.points_for(i, True) for i in range(6))
    assert await leaderboard(engine) == [
        {"player_id": "PLR_a", "name": "p0", "points": expected, "solved_rounds": 6}
    ]


async def test_a_score_for_an_unknown_round_is_refused(engine: AsyncEngine) -> None:
    # Foreign keys hold on both backends: save the round before scoring in it.
    await _seed(engine, ["PLR_a"], [])
    with pytest.raises(IntegrityError):
        await record_score(engine, _score("JOB_1", "PLR_a", 0, True, 5, "RND_nope"))
    assert await _count(engine, ScoreRow) == 0


# --- standings ------------------------------------------------------------------------


async def test_later_solves_and_misses_never_add_points(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a"], ["RND_0"])
    for s in [
        _score("JOB_3", "PLR_a", 3, True, 400),
        _score("JOB_1", "PLR_a", 1, True, 200),
        _score("JOB_0", "PLR_a", 0, False, 100),
        _score("JOB_2", "PLR_a", 2, False, 300),
    ]:
        await record_score(engine, s)
    assert await leaderboard(engine, round_id="RND_0") == [
        {"player_id": "PLR_a", "name": "p0", "points": 100, "solved_rounds": 1}
    ]
    assert await round_solvers(engine, "RND_0") == [{"player_id": "PLR_a", "name": "p0", "seq": 1}]
    assert [s.seq for s in await scores_for(engine, "PLR_a", "RND_0")] == [0, 1, 2, 3]
    assert len(await scores_for(engine, "PLR_a")) == 4


async def test_leaderboard_ties_go_to_who_reached_the_total_first(engine: AsyncEngine) -> None:
    players = ["PLR_a", "PLR_b", "PLR_c", "PLR_d"]
    await _seed(engine, players, ["RND_0", "RND_1"])
    for s in [
        # c and a both reach 110, c earlier; b reaches 110 too but later still.
        _score("JOB_a0", "PLR_a", 0, True, 300),
        _score("JOB_c0", "PLR_c", 0, True, 100),
        _score("JOB_b0", "PLR_b", 1, False, 50),
        _score("JOB_b1", "PLR_b", 0, True, 10_400, "RND_1"),
        # d only missed: on the board with 0, below everyone who scored.
        _score("JOB_d0", "PLR_d", 0, False, 5),
    ]:
        await record_score(engine, s)
    board = await leaderboard(engine)
    assert [(p["player_id"], p["points"]) for p in board] == [
        ("PLR_c", 110),
        ("PLR_a", 110),
        ("PLR_b", 110),
        ("PLR_d", 0),
    ]
    assert [p["solved_rounds"] for p in board] == [1, 1, 1, 0]
    per_round = await leaderboard(engine, round_id="RND_0")
    assert [(p["player_id"], p["points"]) for p in per_round] == [
        ("PLR_c", 110),
        ("PLR_a", 110),
        ("PLR_d", 0),
        ("PLR_b", 0),
    ]
    assert len(await leaderboard(engine, limit=2)) == 2


async def test_round_solvers_are_listed_in_acceptance_order(engine: AsyncEngine) -> None:
    await _seed(engine, ["PLR_a", "PLR_b", "PLR_c", "PLR_d"], ["RND_0"])
    # Scored in reverse order of acceptance; d never solves.
    for s in [
        _score("JOB_d", "PLR_d", 0, False, 50),
        _score("JOB_c1", "PLR_c", 4, True, 900),
        _score("JOB_c0", "PLR_c", 2, True, 700),  # c's solving guess is this earlier one
        _score("JOB_b", "PLR_b", 0, True, 400),
        _score("JOB_a", "PLR_a", 5, True, 400),  # same time as b: mint order breaks it
    ]:
        await record_score(engine, s)
    assert await round_solvers(engine, "RND_0") == [
        {"player_id": "PLR_a", "name": "p0", "seq": 5},
        {"player_id": "PLR_b", "name": "p1", "seq": 0},
        {"player_id": "PLR_c", "name": "p2", "seq": 2},
    ]
    assert await round_solvers(engine, "RND_nope") == []


# --- players and rounds -----------------------------------------------------------------


async def test_players_are_found_by_token_hash_and_named(engine: AsyncEngine) -> None:
    ada = await create_player(engine, "Ada 🍎", hash_token("secret-token"), 1_700)
    assert ada.player_id.startswith("PLR_") and len(ada.player_id) == 30
    assert ada.token_hash != "secret-token" and len(ada.token_hash) == 64
    assert await player_by_token_hash(engine, hash_token("secret-token")) == ada
    assert await player_by_token_hash(engine, hash_token("other")) is None
    assert await get_player(engine, ada.player_id) == ada
    assert await player_names(engine, [ada.player_id, "PLR_unknown"]) == {ada.player_id: "Ada 🍎"}
    assert await player_names(engine, []) == {}


async def test_rounds_are_saved_once_and_the_latest_is_found(engine: AsyncEngine) -> None:
    assert await latest_round(engine) is None
    first = Round("RND_1", 4, rules.DEFAULT_PALETTE, SECRET, 1_000, 2_000)
    second = Round("RND_2", 4, rules.DEFAULT_PALETTE, MISS, 2_000, 3_000)
    assert await save_round(engine, first) is True
    assert await save_round(engine, dataclasses.replace(first, secret=MISS)) is False
    assert await save_round(engine, second) is True
    assert await get_round(engine, "RND_1") == first  # the first save stands
    assert await get_round(engine, "RND_nope") is None
    assert await latest_round(engine) == second


# --- dead jobs ------------------------------------------------------------------------


async def test_dead_jobs_are_kept_retried_and_discarded(engine: AsyncEngine) -> None:
    def dead(job_id: str, attempts: int, died_at_ms: int) -> dict[str, Any]:
        return {
            "job_id": job_id,
            "queue": "guesses",
            "lane": "PLR_a",
            "payload": {"guess": ["🍎"]},
            "error": "boom",
            "reason": "lease expired too often",
            "attempts": attempts,
            "died_at_ms": died_at_ms,
        }

    assert await upsert_dead(engine, **dead("JOB_1", 5, 100)) is True
    assert await upsert_dead(engine, **dead("JOB_2", 5, 200)) is True
    assert await upsert_dead(engine, **dead("JOB_1", 5, 150)) is False  # same death again
    assert [d.job_id for d in await list_dead(engine)] == ["JOB_2", "JOB_1"]
    assert [d.job_id for d in await list_dead(engine, limit=1)] == ["JOB_2"]

    job = await get_dead(engine, "JOB_1")
    assert job is not None and job.payload == '{"guess": ["🍎"]}'
    assert (job.attempts, job.died_at_ms, job.retried_at_ms, job.discarded) == (5, 100, None, False)

    assert await mark_dead_retried(engine, "JOB_1", 300) is True
    assert await mark_dead_retried(engine, "JOB_1", 301) is False  # already retried
    assert await delete_dead(engine, "JOB_1") is False  # back on its lane: nothing to discard
    assert [d.job_id for d in await list_dead(engine)] == ["JOB_2"]
    assert await upsert_dead(engine, **dead("JOB_1", 5, 100)) is False  # stale report
    retried = await get_dead(engine, "JOB_1")
    assert retried is not None and retried.retried_at_ms == 300

    # It dies again after the retry: the row reopens with the new death.
    assert await upsert_dead(engine, **dead("JOB_1", 10, 900)) is True
    reopened = await get_dead(engine, "JOB_1")
    assert reopened is not None
    assert (reopened.attempts, reopened.died_at_ms, reopened.retried_at_ms) == (10, 900, None)
    assert [d.job_id for d in await list_dead(engine)] == ["JOB_1", "JOB_2"]

    assert await delete_dead(engine, "JOB_2") is True
    assert await delete_dead(engine, "JOB_2") is False
    assert await mark_dead_retried(engine, "JOB_2", 1_000) is False
    assert await delete_dead(engine, "JOB_nope") is False
    assert [d.job_id for d in await list_dead(engine)] == ["JOB_1"]
    handled = await list_dead(engine, include_handled=True)
    assert {d.job_id: d.discarded for d in handled} == {"JOB_1": False, "JOB_2": True}
    assert await get_dead(engine, "JOB_nope") is None


async def test_many_deaths_in_one_statement_are_recorded_as_one_at_a_time(
    engine: AsyncEngine,
) -> None:
    def death(job_id: str, attempts: int, died_at_ms: int) -> Death:
        return Death(job_id, "guesses", None, {"n": attempts}, None, "dead", attempts, died_at_ms)

    assert await upsert_dead_many(engine, []) == 0
    assert await upsert_dead(engine, **dataclasses.asdict(death("JOB_1", 5, 100))) is True
    assert await mark_dead_retried(engine, "JOB_1", 150) is True
    # JOB_1 again at the same attempts (stale), JOB_2 new, JOB_3 twice in one batch: its
    # later death wins and counts once.
    batch = [death("JOB_1", 5, 100), death("JOB_2", 5, 200), death("JOB_3", 5, 300)]
    assert await upsert_dead_many(engine, [*batch, death("JOB_3", 10, 400)]) == 2
    assert await upsert_dead_many(engine, batch) == 0  # the same sweep again: nothing new
    rows = {d.job_id: d for d in await list_dead(engine, include_handled=True)}
    assert rows["JOB_1"].retried_at_ms == 150  # a stale report leaves the retry stamped
    assert (rows["JOB_3"].attempts, rows["JOB_3"].died_at_ms) == (10, 400)
    # JOB_1 dies again after its retry: the batch reopens its row.
    assert await upsert_dead_many(engine, [death("JOB_1", 10, 900), death("JOB_2", 5, 200)]) == 1
    reopened = await get_dead(engine, "JOB_1")
    assert reopened is not None
    assert (reopened.attempts, reopened.died_at_ms, reopened.retried_at_ms) == (10, 900, None)
    assert reopened.payload == '{"n": 10}'
    # More rows than one statement takes (500): all recorded, in the one transaction.
    crowd = [death(f"JOB_c{i:04}", 1, i) for i in range(1_201)]
    assert await upsert_dead_many(engine, crowd) == 1_201
    assert await upsert_dead_many(engine, crowd) == 0
    assert len(await list_dead(engine, limit=2_000)) == 1_201 + 3
