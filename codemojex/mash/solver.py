"""An honest player's brain: the consistent-candidate Mastermind strategy.

Keep every code that would have produced all the feedback seen so far and guess one of them
at random. Over the default 8 emojis × 4 places (4,096 codes) it solves in about six
guesses, which is how a person who reads the pegs plays — unlike a masher, whose guesses
ignore them. Pure: no I/O, randomness only from the ``random.Random`` it is given.
"""

from __future__ import annotations

import functools
import itertools
import operator
import random
from collections.abc import Sequence

_Code = tuple[int, ...]
# A code with its colour counts, precomputed because ``near`` needs them for every code.
_Entry = tuple[_Code, tuple[int, ...]]


def _counts(code: _Code, colours: int) -> tuple[int, ...]:
    out = [0] * colours
    for c in code:
        out[c] += 1
    return tuple(out)


@functools.cache
def _every_code(colours: int, length: int) -> list[_Entry]:
    """Every code, built once per process and shared: :meth:`Solver.learn` never mutates
    a candidate list, it makes a new one."""
    return [
        (code, _counts(code, colours)) for code in itertools.product(range(colours), repeat=length)
    ]


class Solver:
    """Candidates for one round's secret, narrowed by each guess's ``exact``/``near``."""

    def __init__(self, palette: Sequence[str], length: int, rng: random.Random) -> None:
        self.palette = tuple(palette)
        self.length = length
        self.rng = rng
        self._index = {emoji: i for i, emoji in enumerate(self.palette)}
        self._candidates = _every_code(len(self.palette), length)
        self.solved = False
        self.guesses = 0

    @property
    def remaining(self) -> int:
        return len(self._candidates)

    def next_guess(self) -> list[str]:
        """A code consistent with everything learnt so far (any code if nothing fits, which
        only happens when feedback from a different secret slipped in)."""
        self.guesses += 1
        if self._candidates:
            code = self.rng.choice(self._candidates)[0]
        else:
            code = tuple(self.rng.randrange(len(self.palette)) for _ in range(self.length))
        return [self.palette[i] for i in code]

    def learn(self, guess: Sequence[str], exact: int, near: int) -> None:
        """Keep only the codes that would have answered ``guess`` with this feedback."""
        if exact == self.length:
            self.solved = True
        code = tuple(self._index[e] for e in guess)
        # Only the guess's own colours can contribute to ``near``: at most ``length`` of them.
        wanted = [(c, n) for c, n in enumerate(_counts(code, len(self.palette))) if n]
        kept = []
        for entry in self._candidates:
            cand, cand_counts = entry
            hits = sum(map(operator.eq, cand, code))
            if hits == exact and sum(min(cand_counts[c], n) for c, n in wanted) - hits == near:
                kept.append(entry)
        self._candidates = kept
