"""The ledger: every guess the server accepted, and every score its player's socket got.

Times are seconds on the client's monotonic clock since the load started. Latency is from
the ``202`` answer to the score message, both read on this client, so no clocks need to
agree. A score can overtake its own ``202`` (a fast worker, a slow response): it is kept
aside until the acceptance is recorded, and its latency counts as zero.

Beside it, the **server lag** of each guess: from its JOB id's mint time (the web server's
clock) to its completion event's stream id (Valkey's clock) — the time spent queued and
scored, without the trip to the socket and this client's own delays. On one machine
(``codemojex up``) the two clocks are the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from echomq.ids import ulid_time_ms

Kind = Literal["honest", "masher"]
KINDS: tuple[Kind, ...] = ("honest", "masher")

# What identifies a score: two messages for one job that differ in any of these are two
# different scores, i.e. the job was counted twice. event_id is left out on purpose: a
# replay after a reconnect resends the same score.
SCORE_FIELDS = ("round_id", "seq", "guess", "exact", "near", "solved", "points")


def score_identity(message: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        tuple(v) if isinstance(v, list) else v for v in (message.get(k) for k in SCORE_FIELDS)
    )


def server_lag(message: dict[str, Any]) -> float | None:
    """Seconds from the job's mint (its id) to its completion (the event id), or None."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        done_ms = int(str(message["event_id"]).partition("-")[0])
        return max(0.0, (done_ms - ulid_time_ms(str(message["job_id"]))) / 1000)
    return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile of ``values`` (``q`` from 0 to 100); None when empty.

    The smallest value with at least ``q`` percent of the values at or below it: a value
    that was measured, never one interpolated between two. The one percentile of the load
    script and the benchmarks (bench_door, bench_game). ``q * n / 100``, not
    ``q / 100 * n``: with a whole ``q`` and ``n`` it is exact, where ``7 / 100 * 100`` is
    ``7.000000000000001`` and would take the next rank."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered) / 100)
    return ordered[min(len(ordered), max(1, rank)) - 1]


@dataclass(slots=True)
class Guess:
    job_id: str
    player_id: str
    kind: Kind
    round_id: str
    seq: int
    guess: list[str]
    accepted_at: float
    scored_at: float | None = None  # first score message for it
    server_lag: float | None = None  # JOB id minted -> completion event, server clocks
    scores: list[dict[str, Any]] = field(default_factory=list)  # distinct scores seen
    messages: int = 0  # score messages seen, duplicates (replays) included
    sent_at: float | None = None  # its first POST left this client

    @property
    def answered_in(self) -> float | None:
        """From its first POST to its ``202`` (retries included)."""
        return None if self.sent_at is None else max(0.0, self.accepted_at - self.sent_at)

    @property
    def latency(self) -> float | None:
        if self.scored_at is None:
            return None
        return max(0.0, self.scored_at - self.accepted_at)


class Ledger:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.guesses: dict[str, Guess] = {}
        self.by_kind: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # every 429 (lane_full, rate_limited), per kind
        self.rate_limited: Counter[str] = Counter()  # the 429s that were rate_limited
        self.round_closed: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # other refusals, per kind
        self.unknown: Counter[str] = Counter()  # no answer even after retries, per kind
        self.overloaded: Counter[str] = Counter()  # guesses the door refused (503 overloaded)
        self.submitted: Counter[str] = Counter()  # guesses sent, per kind (not retries)
        # every HTTP answer to a guess, retries included, by status, per kind
        self.statuses: dict[str, Counter[int]] = {k: Counter() for k in KINDS}
        self.scored = 0
        self.gaps: set[str] = set()  # players whose socket reported trimmed events
        # (scored_at, latency) per kind, in arrival order: the live figures read these
        # instead of scanning every guess.
        self.samples: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
        self._early: dict[str, tuple[float, list[dict[str, Any]], int]] = {}
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    def restart_clock(self) -> None:
        """Time zero is when the load starts, after set-up."""
        self.t0 = time.monotonic()

    # -- recording ------------------------------------------------------------------------------

    def accept(
        self,
        job_id: str,
        player_id: str,
        kind: Kind,
        round_id: str,
        seq: int,
        guess: list[str],
        sent_at: float | None = None,
    ) -> Guess:
        g = self.guesses.get(job_id)
        if g is not None:
            return g  # the same job answered twice (an idempotent retry): one guess
        g = Guess(job_id, player_id, kind, round_id, seq, guess, self.now(), sent_at=sent_at)
        self.guesses[job_id] = g
        self.by_kind[kind] += 1
        early = self._early.pop(job_id, None)
        if early is not None:
            at, scores, messages = early
            g.scored_at, g.scores, g.messages = at, scores, messages
            g.server_lag = server_lag(scores[0])
            self._scored(g)
        return g

    def deliver(self, message: dict[str, Any]) -> None:
        """A ``score`` message arrived on its player's socket."""
        job_id = str(message.get("job_id"))
        g = self.guesses.get(job_id)
        if g is None:  # its 202 is still on the way
            at, scores, messages = self._early.get(job_id, (self.now(), [], 0))
            _add_distinct(scores, message)
            self._early[job_id] = (at, scores, messages + 1)
            return
        g.messages += 1
        _add_distinct(g.scores, message)
        if g.scored_at is None:
            g.scored_at = self.now()
            g.server_lag = server_lag(message)
            self._scored(g)
        waiter = self._waiters.pop(job_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(message)

    def _scored(self, g: Guess) -> None:
        self.scored += 1
        assert g.scored_at is not None and g.latency is not None
        self.samples[g.kind].append((g.scored_at, g.latency))

    async def wait_score(self, job_id: str, timeout: float) -> dict[str, Any] | None:
        """The job's score once its socket delivers it; None after ``timeout`` seconds."""
        g = self.guesses.get(job_id)
        if g is not None and g.scores:
            return g.scores[0]
        fut = self._waiters.setdefault(job_id, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return None
        finally:
            if not fut.done():
                self._waiters.pop(job_id, None)

    # -- figures --------------------------------------------------------------------------------

    @property
    def accepted(self) -> int:
        return len(self.guesses)

    @property
    def in_flight(self) -> int:
        return self.accepted - self.scored

    @property
    def unsolicited(self) -> int:
        """Scores for jobs this client never saw accepted (their answer was lost)."""
        return len(self._early)

    def latencies(self, kind: str, since: float = -1.0) -> list[float]:
        """Latencies of ``kind``'s guesses scored at or after ``since``."""
        return [lat for at, lat in self.samples[kind] if at >= since]

    def answer_times(self, kind: str) -> list[float]:
        """From each accepted guess's first POST to its ``202``."""
        return [
            g.answered_in
            for g in self.guesses.values()
            if g.kind == kind and g.answered_in is not None
        ]

    def click_to_score(self, kind: str) -> list[float]:
        """From each scored guess's first POST to its score on the socket: what a player
        waits for, all told."""
        return [
            g.scored_at - g.sent_at
            for g in self.guesses.values()
            if g.kind == kind and g.scored_at is not None and g.sent_at is not None
        ]

    def server_lags(self, kind: str) -> list[float]:
        return [
            g.server_lag
            for g in self.guesses.values()
            if g.kind == kind and g.server_lag is not None
        ]

    def by_player(self) -> dict[str, list[Guess]]:
        out: dict[str, list[Guess]] = {}
        for g in self.guesses.values():
            out.setdefault(g.player_id, []).append(g)
        return out

    def rows(self) -> Iterable[Guess]:
        return self.guesses.values()


def _add_distinct(scores: list[dict[str, Any]], message: dict[str, Any]) -> None:
    ident = score_identity(message)
    if all(score_identity(s) != ident for s in scores):
        scores.append(message)
