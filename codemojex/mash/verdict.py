"""The verdict: was every accepted guess scored exactly once, and did every kill get rescued?

For each guess the server answered ``202``:

* **lost** — its score never reached its player's socket (deduplicated by job id across
  reconnects), or ``GET /api/guesses/{id}`` does not show it ``completed`` with a score;
* **doubled** — the socket delivered two *different* scores for it, the stored score
  disagrees with the delivered one or with the ``seq`` of the ``202``, two accepted guesses
  of a player share a ``seq``, or the leaderboard gives a player more points than the rules
  compute from their accepted guesses (per round: the best ``max(10, 110 - 10·seq)`` over
  solving guesses; all-time: the sum). Fewer points than that count as lost.

Where a round has closed by then, its revealed secret is used to recompute each stored
score's pegs with the rules; a disagreement counts as doubled too (a score not of this guess).

A killed worker writes down the jobs it is scoring as the kill lands (``held``). The kill
is **rescued** when it caught at least one job and every one of them ended ``completed``
with ``attempts ≥ 2``: another worker took it over. A kill that caught no job arrived
between scores (a **miss**, not a failure). A caught job completed with ``attempts == 1``
would be a completion by the dead worker — fencing broken — and counts as doubled. Where
the worker could not write down what it held, the job the admin view reported stands in.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from codemojex.mash.api import GameApi
from codemojex.mash.chaos import Kill
from codemojex.mash.ledger import Ledger
from codemojex.mash.players import Player
from codemojex.rules import feedback, points_for

VERIFY_CONCURRENCY = 32
VERIFY_ATTEMPTS = 3
LEADERBOARD_LIMIT = 100  # the server lists at most this many players
PROBLEMS_KEPT = 50


@dataclass(slots=True)
class Verdict:
    accepted: int = 0
    scored: int = 0
    lost: int = 0
    doubled: int = 0
    kills: int = 0
    rescued: int = 0
    missed_kills: int = 0
    reclaimed: int = 0  # accepted guesses the queue delivered to a worker more than once
    seq_gaps: int = 0  # seqs taken by submissions whose answer this client never got
    unknown_outcomes: int = 0
    gap_recovered: int = 0  # scored, not seen on the socket, but the socket reported a gap
    problems: list[str] = field(default_factory=list)  # why something counts lost or doubled
    notes: list[str] = field(default_factory=list)  # missed kills and the like: no failure

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.doubled == 0

    def line(self) -> str:
        return (
            f"lost: {self.lost}, doubled: {self.doubled}, kills: {self.kills}, "
            f"rescued: {self.rescued}, accepted: {self.accepted}, scored: {self.scored}"
        )

    def problem(self, text: str) -> None:
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(text)

    def note(self, text: str) -> None:
        if len(self.notes) < PROBLEMS_KEPT:
            self.notes.append(text)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "line": self.line()}


async def _views(
    apis: dict[str, GameApi], ledger: Ledger, players: dict[str, Player]
) -> dict[str, dict[str, Any] | None]:
    """``GET /api/guesses/{id}`` for every accepted guess, as its owner, on its own client."""
    gate = asyncio.Semaphore(VERIFY_CONCURRENCY)
    out: dict[str, dict[str, Any] | None] = {}

    async def one(player_id: str, job_ids: list[str]) -> None:
        token, api = players[player_id].token, apis[player_id]
        for job_id in job_ids:
            async with gate:
                out[job_id] = await _view(api, token, job_id)

    mine: dict[str, list[str]] = defaultdict(list)
    for g in ledger.rows():
        mine[g.player_id].append(g.job_id)
    await asyncio.gather(*(one(pid, jobs) for pid, jobs in mine.items()))
    return out


async def _view(api: GameApi, token: str, job_id: str) -> dict[str, Any] | None:
    for attempt in range(VERIFY_ATTEMPTS):
        try:
            return await api.guess(token, job_id)
        except Exception:  # noqa: BLE001 - retried, then counted as not shown
            await asyncio.sleep(0.2 * (attempt + 1))
    return None


def _check_guesses(v: Verdict, ledger: Ledger, views: dict[str, dict[str, Any] | None]) -> None:
    for g in ledger.rows():
        view = views.get(g.job_id)
        stored = view.get("score") if view else None
        shown = view is not None and view.get("state") == "completed" and stored is not None
        if view is not None and int(view.get("attempts") or 0) >= 2:
            v.reclaimed += 1
        if len(g.scores) > 1:
            v.doubled += 1
            v.problem(f"{g.job_id}: {len(g.scores)} different scores reached the socket")
        elif g.scores and shown and view is not None:
            s = g.scores[0]
            assert stored is not None
            same = (
                s.get("seq") == g.seq == view.get("seq")
                and s.get("round_id") == g.round_id
                and all(s.get(k) == stored.get(k) for k in ("exact", "near", "points"))
            )
            if not same:
                v.doubled += 1
                v.problem(f"{g.job_id}: delivered {s} but stored {view} (seq {g.seq} at 202)")
        if not shown:
            v.lost += 1
            state = view.get("state") if view else "not found"
            v.problem(f"{g.job_id}: GET shows state {state!r}, score {stored!r}")
        elif not g.scores:
            if g.player_id in ledger.gaps:
                v.gap_recovered += 1
                v.scored += 1
            else:
                v.lost += 1
                v.problem(f"{g.job_id}: scored, but the score never reached the socket")
        else:
            v.scored += 1


def _check_seqs(v: Verdict, ledger: Ledger) -> None:
    seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for g in ledger.rows():
        seqs[(g.player_id, g.round_id)].append(g.seq)
    for (player_id, round_id), got in seqs.items():
        distinct = set(got)
        if len(distinct) != len(got):
            v.doubled += len(got) - len(distinct)
            v.problem(f"{player_id} in {round_id}: seqs repeat: {sorted(got)}")
        v.seq_gaps += max(distinct) + 1 - len(distinct)


def expected_points(
    ledger: Ledger, views: dict[str, dict[str, Any] | None]
) -> dict[str, dict[str, int]]:
    """round_id -> player_id -> points, by the rules, from the accepted guesses' seqs."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for g in ledger.rows():
        score = (views.get(g.job_id) or {}).get("score")
        if score is None:
            continue
        earned = points_for(g.seq, bool(score.get("solved")))
        out[g.round_id][g.player_id] = max(out[g.round_id].get(g.player_id, 0), earned)
    return out


def _compare_board(
    v: Verdict, board: list[dict[str, Any]], expected: dict[str, int], what: str
) -> None:
    listed = {p["player_id"]: int(p["points"]) for p in board}
    floor = min(listed.values()) if len(board) >= LEADERBOARD_LIMIT else None
    for player_id, points in expected.items():
        got = listed.get(player_id)
        if got is None:
            if floor is not None and points <= floor:
                continue  # off the end of a full board, where it belongs
            got = 0
        if got > points:
            v.doubled += 1
            v.problem(f"{what}: {player_id} has {got} points, the rules give {points}")
        elif got < points:
            v.lost += 1
            v.problem(f"{what}: {player_id} has {got} points, the rules give {points}")


async def _check_points(
    v: Verdict, api: GameApi, ledger: Ledger, views: dict[str, dict[str, Any] | None]
) -> None:
    per_round = expected_points(ledger, views)
    totals: dict[str, int] = defaultdict(int)
    for round_id, expected in per_round.items():
        _compare_board(v, await api.leaderboard(round_id), expected, f"round {round_id}")
        for player_id, points in expected.items():
            totals[player_id] += points
    # All-time totals: the load script's players are new, so their totals are exactly theirs.
    _compare_board(v, await api.leaderboard(), dict(totals), "all-time")


async def _check_pegs(
    v: Verdict, api: GameApi, ledger: Ledger, views: dict[str, dict[str, Any] | None]
) -> None:
    secrets: dict[str, list[str] | None] = {}
    for round_id in {g.round_id for g in ledger.rows()}:
        info = await api.round(round_id)
        secrets[round_id] = info.get("secret") if info.get("state") == "closed" else None
    for g in ledger.rows():
        secret = secrets.get(g.round_id)
        stored = (views.get(g.job_id) or {}).get("score")
        if secret is None or stored is None:
            continue
        fb = feedback(secret, g.guess)
        if (stored.get("exact"), stored.get("near"), stored.get("solved")) != (
            fb.exact,
            fb.near,
            fb.solved,
        ):
            v.doubled += 1
            v.problem(f"{g.job_id}: stored {stored}, the rules give {fb}")


def _check_kills(v: Verdict, kills: list[Kill], views: dict[str, dict[str, Any] | None]) -> None:
    v.kills = len(kills)
    for k in kills:
        held = k.held if k.held is not None else ([k.job_id] if k.job_id else [])
        if not held:
            v.note(
                f"kill of {k.worker_id} at {k.at:.1f}s landed between scores ({k.job_id} was done)"
            )
            v.missed_kills += 1
            continue
        caught = True
        for job_id in held:
            view = views.get(job_id)
            attempts = int(view.get("attempts") or 0) if view else 0
            if view is None:
                v.note(f"kill of {k.worker_id}: its job {job_id} is not one of ours")
                caught = False
            elif view.get("score") is None:
                # Counted lost already, with the guesses.
                v.note(
                    f"kill of {k.worker_id} at {k.at:.1f}s: {job_id} has no stored score "
                    f"(state {view.get('state')!r}, attempts {attempts})"
                )
                caught = False
            elif attempts < 2:
                if k.held is None:  # only the admin view's guess: the kill came too late
                    v.note(f"kill of {k.worker_id} at {k.at:.1f}s landed after {job_id} was scored")
                else:
                    v.doubled += 1
                    v.problem(
                        f"{job_id} was held by {k.worker_id} when it was killed, yet "
                        "ended completed on its first attempt"
                    )
                caught = False
        if caught:
            v.rescued += 1
        else:
            v.missed_kills += 1


async def judge(
    api: GameApi,
    apis: dict[str, GameApi],
    ledger: Ledger,
    players: dict[str, Player],
    kills: list[Kill],
) -> Verdict:
    """``api`` for the public reads, ``apis`` (player id -> client) for the owners' reads."""
    v = Verdict(accepted=ledger.accepted, unknown_outcomes=sum(ledger.unknown.values()))
    views = await _views(apis, ledger, players)
    _check_guesses(v, ledger, views)
    _check_seqs(v, ledger)
    await _check_pegs(v, api, ledger, views)
    await _check_points(v, api, ledger, views)
    _check_kills(v, kills, views)
    return v
