"""Scenario 9: a Hypothesis state machine over the whole scoring path, against the real
Valkey and the real SQL: submit (``Game.submit``) → claim (``Lanes.claim``) → score
(``ScoreWorker.handle``, the idempotent SQL write) → complete (``Jobs.complete``), with
rules for kills (a claim dropped on the floor), freezes and the zombies' late
completions, reaps, scoring twice, dead jobs retried and rounds closing. After every step
the leaderboard must equal the model's: the rules applied to the accepted guesses (and
their seqs) that were scored — whatever was killed, retried, raced or refused.

Time is not waited for: a lease runs out when its score in the active set is moved to 0
with ``ZADD XX`` — exactly what the server sees once its clock passes the deadline — and
the reaper is then called. Every lease is minted long (10 min), so nothing lapses alone.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select

import echomq
from codemojex.config import Config
from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE, feedback, points_for
from codemojex.score_worker import ScoreWorker
from codemojex.store.models import ScoreRow
from echomq.server import EmbeddedValkey
from tests.chaos import harness
from tests.chaos.harness import Figures

pytestmark = pytest.mark.chaos

LEASE_MS = 600_000
MAX_ATTEMPTS = 5  # Guesses.submit's default
PLAYERS = 3
WORKERS = ("WRK_m1", "WRK_m2")
MAX_JOBS = 12  # per example: the other rules get the steps


@dataclass
class MJob:
    player_id: str
    round_id: str
    seq: int
    guess: tuple[str, ...]
    state: str = "pending"  # pending | active | completed | dead
    attempts: int = 0
    stalls: int = 0


class ScoringMachine(RuleBasedStateMachine):
    valkey_url = ""
    sql_url = ""
    tally: dict[str, int] = {}  # noqa: RUF012 - figures across all examples

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        config = Config(
            valkey_url=self.valkey_url,
            database_url=self.sql_url,
            round_seconds=3_600,
            lease_ms=LEASE_MS,
            guess_rate=0,
        )
        self.game = Game.connect(config)
        self.run(self.game.conn.flushall())  # a private server: nothing else lives here
        tag = uuid.uuid4().hex[:6]
        self.players = self.run(harness.new_players(self.game, PLAYERS, tag=f"m{tag}-"))
        self.round = self.run(self.game.current_round())[0]
        self.secrets = {self.round.round_id: self.round.secret}
        self.scorers = {w: ScoreWorker(self.game.engine, self.game.rounds, w) for w in WORKERS}
        # The model.
        self.jobs: dict[str, MJob] = {}
        self.live: list[tuple[str, echomq.Claim]] = []  # (worker, claim) held by a live worker
        self.zombies: list[tuple[str, echomq.Claim]] = []  # frozen holders, may wake up late
        self.scored: set[str] = set()

    def run(self, aw: Any) -> Any:
        return self.loop.run_until_complete(aw)

    def teardown(self) -> None:
        self.run(self.game.close())
        self.loop.close()

    def count(self, name: str) -> None:
        self.tally[name] = self.tally.get(name, 0) + 1

    # -- rules ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        who=st.integers(0, PLAYERS - 1),
        solve=st.booleans(),
        pattern=st.lists(st.integers(0, 7), min_size=4, max_size=4),
    )
    def submit(self, who: int, solve: bool, pattern: list[int]) -> None:
        player = self.players[who]
        guess = list(self.round.secret) if solve else [DEFAULT_PALETTE[i] for i in pattern]
        acc = self.run(self.game.submit(player, self.round.round_id, guess))
        want_seq = sum(
            1
            for j in self.jobs.values()
            if j.player_id == player and j.round_id == self.round.round_id
        )
        assert acc.created and acc.seq == want_seq
        self.jobs[acc.job_id] = MJob(player, self.round.round_id, acc.seq, tuple(guess))
        self.count("submitted")

    @precondition(lambda self: any(j.state == "pending" for j in self.jobs.values()))
    @rule(w=st.sampled_from(WORKERS))
    def claim(self, w: str) -> None:
        c = self.run(self.game.queue.lanes.claim(w, LEASE_MS))
        assert c is not None
        job = self.jobs[c.job_id]
        assert job.state == "pending" and c.token == job.attempts + 1 and c.seq == job.seq
        job.state, job.attempts = "active", c.token
        self.live.append((w, c))
        self.count("claims")

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99))
    def score_and_complete(self, i: int) -> None:
        """What a live worker does: score (SQL), then complete under its token."""
        w, c = self.live.pop(i % len(self.live))
        self._score(w, c)
        self._complete(w, c)
        self.count("scored and completed")

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99))
    def die_after_commit(self, i: int) -> None:
        """Scored and committed, killed before completing: the claim is gone."""
        w, c = self.live.pop(i % len(self.live))
        self._score(w, c)
        self.count("killed after commit")

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99))
    def die_after_claim(self, i: int) -> None:
        self.live.pop(i % len(self.live))
        self.count("killed after claim")

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 99))
    def freeze(self, i: int) -> None:
        """The holder stops (GC pause, SIGSTOP); it may wake up much later."""
        self.zombies.append(self.live.pop(i % len(self.live)))

    @precondition(lambda self: self.zombies)
    @rule(i=st.integers(0, 99))
    def zombie_wakes(self, i: int) -> None:
        """A frozen holder resumes: it scores (a no-op if done) and completes — refused
        when its job was reclaimed meanwhile."""
        w, c = self.zombies.pop(i % len(self.zombies))
        self._score(w, c)
        ok = self._complete(w, c)
        self.count("zombie completions accepted" if ok else "stale completions refused")

    @precondition(lambda self: self.scored)
    @rule(data=st.data())
    def score_twice(self, data: st.DataObject) -> None:
        """Any scored guess scored again, by any worker, with any token: no effect."""
        jid = data.draw(st.sampled_from(sorted(self.scored)))
        w = data.draw(st.sampled_from(WORKERS))
        job = self.jobs[jid]
        c = echomq.Claim(
            jid,
            job.player_id,
            {"player_id": job.player_id, "round_id": job.round_id, "guess": list(job.guess)},
            max(1, job.attempts),
            0,
            seq=job.seq,
        )
        wrote = self.run(self.scorers[w].handle(c))
        assert wrote["points"] == points_for(
            job.seq, feedback(self.secrets[job.round_id], job.guess).solved
        )
        self.count("scored twice")

    @precondition(lambda self: any(j.state == "active" for j in self.jobs.values()))
    @rule(data=st.data())
    def reap(self, data: st.DataObject) -> None:
        """A lease runs out (its deadline moved into the past stands in for the clock
        passing it) and the reaper takes the job back."""
        jid = data.draw(
            st.sampled_from(sorted(j for j, m in self.jobs.items() if m.state == "active"))
        )
        q = self.game.queue
        assert self.run(q.conn.zadd(q.keys.active, {jid: 0}, xx=True)) == 0
        assert self.run(q.stalled.reap()) == [jid]
        job = self.jobs[jid]
        job.stalls += 1
        job.state = "dead" if job.stalls >= MAX_ATTEMPTS else "pending"
        self.count("reaps")

    @precondition(lambda self: any(j.state == "dead" for j in self.jobs.values()))
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        jid = data.draw(
            st.sampled_from(sorted(j for j, m in self.jobs.items() if m.state == "dead"))
        )
        self.run(self.game.queue.jobs.retry_dead(jid))
        self.jobs[jid].state = "pending"
        self.jobs[jid].stalls = 0
        self.count("dead retried")

    @precondition(lambda self: len(self.secrets) < 3)
    @rule()
    def close_round(self) -> None:
        closing = self.round
        claim = echomq.Claim(closing.close_job, None, {"round_id": closing.round_id}, 1, 0)
        self.run(self.game.rounds.handle_close(claim))
        self.round = self.run(self.game.rounds.current())
        assert self.round is not None and self.round.round_id != closing.round_id
        self.secrets[self.round.round_id] = self.round.secret
        self.count("rounds closed")

    # -- the path's steps ---------------------------------------------------------------------

    def _score(self, w: str, c: echomq.Claim) -> None:
        self.run(self.scorers[w].handle(c))
        self.scored.add(c.job_id)

    def _complete(self, w: str, c: echomq.Claim) -> bool:
        job = self.jobs[c.job_id]
        want = job.state == "active" and job.attempts == c.token
        ok = self.run(self.game.queue.jobs.complete(c.job_id, c.token, {"by": w}))
        assert ok == want, (c.job_id, c.token, job)
        if ok:
            job.state = "completed"
            # A reclaimed job's older claims are all stale now.
        return bool(ok)

    # -- the invariant --------------------------------------------------------------------------

    def expected(self) -> dict[str, tuple[int, int]]:
        best: dict[tuple[str, str], int] = {}
        for jid in self.scored:
            j = self.jobs[jid]
            pts = points_for(j.seq, feedback(self.secrets[j.round_id], j.guess).solved)
            best[(j.player_id, j.round_id)] = max(best.get((j.player_id, j.round_id), 0), pts)
        out: dict[str, tuple[int, int]] = {}
        for (pid, _), pts in best.items():
            total, solved = out.get(pid, (0, 0))
            out[pid] = (total + pts, solved + (pts > 0))
        return out

    @invariant()
    def leaderboard_equals_model(self) -> None:
        board = self.run(harness.standings(self.game))
        mine = {pid: v for pid, v in board.items() if pid in self.players}
        assert mine == self.expected()

    @invariant()
    def one_score_row_per_scored_guess(self) -> None:
        async def rows() -> list[str]:
            async with self.game.engine.connect() as conn:
                return [
                    r[0]
                    for r in await conn.execute(
                        select(ScoreRow.job_id).where(ScoreRow.player_id.in_(self.players))
                    )
                ]

        found = self.run(rows())
        assert len(found) == len(set(found)) and set(found) == self.scored

    @invariant()
    def queue_agrees(self) -> None:
        for jid, job in self.jobs.items():
            info = self.run(self.game.queue.jobs.get(jid))
            assert info is not None
            assert (info.state, info.attempts) == (job.state, job.attempts), (jid, job)


@pytest.mark.timeout(harness.size(120, 1_200))
def test_leaderboard_always_equals_the_model(
    valkey: EmbeddedValkey,
    sql_url: str,
    figures: Figures,
    tmp_path: Path,
) -> None:
    ScoringMachine.valkey_url = valkey.url
    ScoringMachine.sql_url = sql_url
    ScoringMachine.tally = {}
    examples, steps = harness.size(40, 200), harness.size(30, 50)
    run_state_machine_as_test(
        ScoringMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
    figures.record(
        "9 stateful model of the scoring path",
        examples=examples,
        max_steps=steps,
        **dict(sorted(ScoringMachine.tally.items())),
    )
