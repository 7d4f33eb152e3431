"""The field's progress: per round, how far each player got — counts only, never emojis.

Honest about what one web process can know: ``guesses`` is the highest ``seq`` + 1 seen
(from score events, and from guesses this process accepted), ``scored`` counts score
events, ``best_exact``/``best_near`` are those of the best feedback so far. A process
started mid-round knows only what it has seen since. Rows that changed since the last
flush are remembered, so each progress message carries only those.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

ROUNDS_KEPT = 3  # late scores of a closed round keep coming after the next one opened


@dataclass(slots=True)
class PlayerProgress:
    guesses: int = 0
    scored: int = 0
    best: tuple[int, int] = (0, 0)  # (exact, near) of the best feedback so far
    solved: bool = False

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
class _Round:
    players: dict[str, PlayerProgress] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)


class FieldProgress:
    def __init__(self, rounds_kept: int = ROUNDS_KEPT) -> None:
        self._rounds: OrderedDict[str, _Round] = OrderedDict()
        self._kept = rounds_kept

    def accepted(self, round_id: str, player_id: str, seq: int) -> None:
        r = self._round(round_id)
        p = r.players.setdefault(player_id, PlayerProgress())
        if seq + 1 > p.guesses:
            p.guesses = seq + 1
            r.changed.add(player_id)

    def scored(
        self, round_id: str, player_id: str, seq: object, exact: object, near: object, solved: bool
    ) -> None:
        r = self._round(round_id)
        p = r.players.setdefault(player_id, PlayerProgress())
        p.scored += 1
        p.guesses = max(p.guesses, p.scored, seq + 1 if isinstance(seq, int) else 0)
        if isinstance(exact, int) and isinstance(near, int):
            p.best = max(p.best, (exact, near))
        p.solved = p.solved or solved
        r.changed.add(player_id)

    def opened(self, round_id: str) -> None:
        self._round(round_id)

    def players(self, round_id: str) -> dict[str, PlayerProgress]:
        r = self._rounds.get(round_id)
        return dict(r.players) if r else {}

    def changed_ids(self) -> set[str]:
        """Every player with a change not yet taken, whatever the round."""
        return {pid for r in self._rounds.values() for pid in r.changed}

    def take_changes(self) -> list[tuple[str, dict[str, PlayerProgress]]]:
        """Per round, the players that changed since the last call (and forget that)."""
        out = []
        for round_id, r in self._rounds.items():
            if r.changed:
                out.append((round_id, {pid: r.players[pid] for pid in sorted(r.changed)}))
                r.changed.clear()
        return out

    def _round(self, round_id: str) -> _Round:
        r = self._rounds.get(round_id)
        if r is None:
            r = self._rounds[round_id] = _Round()
            while len(self._rounds) > self._kept:
                self._rounds.popitem(last=False)
        return r
