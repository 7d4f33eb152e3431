"""The field's progress: per round, the counts of the whole field and its leaders — counts
only, never emojis.

Honest about what one web process can know: a player's ``guesses`` is the highest ``seq``
+ 1 seen (from score events, and from guesses this process accepted), ``scored`` counts
score events, ``best_exact``/``best_near`` are those of the best feedback so far. A process
started mid-round knows only what it has seen since.

What goes out is bounded whatever the crowd (docs/contract.md §4): the round's counts (``playing``,
``guesses``, ``solved``) and at most :data:`LEADERS` rows. The counts are kept as the
players change, so a message costs the leaders' selection, not a walk of every row; the
selection itself runs only when a change could have moved a leader.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

ROUNDS_KEPT = 3  # late scores of a closed round keep coming after the next one opened
LEADERS = 20  # rows per progress message: the round's leaders
_UNSOLVED = 1 << 62  # sorts after every real seq


@dataclass(slots=True)
class PlayerProgress:
    guesses: int = 0
    scored: int = 0
    best: tuple[int, int] = (0, 0)  # (exact, near) of the best feedback so far
    solved_seq: int | None = None  # the seq of the guess that solved, once one did

    @property
    def solved(self) -> bool:
        return self.solved_seq is not None

    def rank(self, player_id: str) -> tuple[int, int, int, int, str]:
        """The leaders' order: solved first (by the solving guess's seq), then best exact,
        best near, fewest guesses; the id last so that equal players keep one order."""
        seq = _UNSOLVED if self.solved_seq is None else self.solved_seq
        return (seq, -self.best[0], -self.best[1], self.guesses, player_id)

    def row(self, player_id: str, name: str) -> dict[str, Any]:
        return {
            "player_id": player_id,
            "name": name,
            "guesses": self.guesses,
            "scored": self.scored,
            "best_exact": self.best[0],
            "best_near": self.best[1],
            "solved": self.solved,
        }


@dataclass(slots=True)
class RoundProgress:
    """One round's field: every player's progress, the counts, the current leaders."""

    players: dict[str, PlayerProgress] = field(default_factory=dict)
    guesses: int = 0  # the sum of the players' guesses
    solved: int = 0
    leaders: list[str] = field(default_factory=list)
    changed: bool = False  # since the last take: something a message carries may differ
    _reselect: bool = True  # a change may have moved a leader

    @property
    def playing(self) -> int:
        return len(self.players)

    def touch(self, player_id: str) -> None:
        """Note that ``player_id`` changed: the counts did; the leaders may have."""
        self.changed = True
        if self._reselect:
            return
        if player_id in self.leaders or len(self.leaders) < LEADERS:
            self._reselect = True
            return
        worst = self.leaders[-1]
        if self.players[player_id].rank(player_id) < self.players[worst].rank(worst):
            self._reselect = True

    def top(self) -> list[tuple[str, PlayerProgress]]:
        """The leaders, in order (selected again only when a change may have moved one)."""
        if self._reselect:
            self.leaders = [
                pid
                for pid, _ in heapq.nsmallest(
                    LEADERS, self.players.items(), key=lambda kv: kv[1].rank(kv[0])
                )
            ]
            self._reselect = False
        return [(pid, self.players[pid]) for pid in self.leaders]


class FieldProgress:
    def __init__(self, rounds_kept: int = ROUNDS_KEPT) -> None:
        self._rounds: OrderedDict[str, RoundProgress] = OrderedDict()
        self._kept = rounds_kept

    def accepted(self, round_id: str, player_id: str, seq: int) -> None:
        r, p = self._player(round_id, player_id)
        if seq + 1 > p.guesses:
            r.guesses += seq + 1 - p.guesses
            p.guesses = seq + 1
            r.touch(player_id)

    def scored(
        self, round_id: str, player_id: str, seq: object, exact: object, near: object, solved: bool
    ) -> None:
        r, p = self._player(round_id, player_id)
        p.scored += 1
        guesses = max(p.guesses, p.scored, seq + 1 if isinstance(seq, int) else 0)
        r.guesses += guesses - p.guesses
        p.guesses = guesses
        if isinstance(exact, int) and isinstance(near, int):
            p.best = max(p.best, (exact, near))
        if solved and p.solved_seq is None:
            p.solved_seq = seq if isinstance(seq, int) else p.guesses - 1
            r.solved += 1
        r.touch(player_id)

    def opened(self, round_id: str) -> None:
        self._round(round_id)

    def round(self, round_id: str) -> RoundProgress | None:
        return self._rounds.get(round_id)

    def take_changed(self) -> list[tuple[str, RoundProgress]]:
        """The rounds with a change since the last call (and forget that they had one)."""
        out = [(rid, r) for rid, r in self._rounds.items() if r.changed]
        for _, r in out:
            r.changed = False
        return out

    def _player(self, round_id: str, player_id: str) -> tuple[RoundProgress, PlayerProgress]:
        r = self._round(round_id)
        p = r.players.get(player_id)
        if p is None:
            p = r.players[player_id] = PlayerProgress()
        return r, p

    def _round(self, round_id: str) -> RoundProgress:
        r = self._rounds.get(round_id)
        if r is None:
            r = self._rounds[round_id] = RoundProgress()
            while len(self._rounds) > self._kept:
                self._rounds.popitem(last=False)
        return r
