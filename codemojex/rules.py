"""The rules of emoji Mastermind, pure and side-effect free (docs/contract.md §1).

- A secret and a guess are ``length`` emojis from a palette, repetition allowed.
- Feedback is classic Mastermind: ``exact`` = right emoji in the right place, ``near`` =
  Σ over emojis of min(count in secret, count in guess) − ``exact``.
- A solving guess with sequence number ``seq`` earns ``max(10, 110 - 10 * seq)``; any other
  guess earns 0. A player's points for a round are the maximum over their guesses, so the
  order in which guesses are scored can never change them.

Nothing here does I/O or reads a clock; randomness only in :func:`new_secret`.
"""

from __future__ import annotations

import random
import secrets
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from codemojex.errors import InvalidGuess
from codemojex.names import NAME_MAX_CHARS, validate_name  # re-exported: names are rules too

__all__ = [
    "DEFAULT_LENGTH",
    "DEFAULT_PALETTE",
    "NAME_MAX_CHARS",
    "Feedback",
    "feedback",
    "new_secret",
    "points_for",
    "round_points",
    "validate_guess",
    "validate_name",
]

DEFAULT_PALETTE: tuple[str, ...] = ("🍎", "🍌", "🍇", "🍒", "🥝", "🍋", "🫐", "🍑")
DEFAULT_LENGTH = 4

# Points for a solve: 110 − 10·seq, never below the floor (a late solve still pays a bit).
_SOLVE_BASE = 110
_SOLVE_STEP = 10
_SOLVE_FLOOR = 10


@dataclass(frozen=True, slots=True)
class Feedback:
    """The answer to one guess."""

    exact: int
    near: int
    solved: bool


def feedback(secret: Sequence[str], guess: Sequence[str]) -> Feedback:
    """Classic Mastermind feedback for ``guess`` against ``secret`` (same length)."""
    if len(secret) != len(guess):
        raise ValueError(f"secret has {len(secret)} emojis but guess has {len(guess)}")
    exact = sum(1 for s, g in zip(secret, guess, strict=True) if s == g)
    secret_counts, guess_counts = Counter(secret), Counter(guess)
    common = sum(min(n, guess_counts[emoji]) for emoji, n in secret_counts.items())
    return Feedback(exact=exact, near=common - exact, solved=exact == len(secret))


def points_for(seq: int, solved: bool) -> int:
    """Points earned by the player's guess number ``seq`` (0-based) in a round."""
    if seq < 0:
        raise ValueError(f"seq must be >= 0, got {seq}")
    if not solved:
        return 0
    return max(_SOLVE_FLOOR, _SOLVE_BASE - _SOLVE_STEP * seq)


def round_points(guesses: Iterable[tuple[int, bool]]) -> int:
    """A player's points for a round: the maximum over their ``(seq, solved)`` guesses.

    A maximum, not a sum, so the earliest solving guess counts, later guesses cannot add
    anything (mashing never pays) and the order of scoring is irrelevant.
    """
    return max((points_for(seq, solved) for seq, solved in guesses), default=0)


def validate_guess(
    guess: object,
    palette: Sequence[str] = DEFAULT_PALETTE,
    length: int = DEFAULT_LENGTH,
) -> tuple[str, ...]:
    """Return ``guess`` as a tuple if it is exactly ``length`` palette emojis, else raise.

    The guess comes straight from decoded JSON, so anything may arrive here. Emojis are
    compared as exact strings: no normalisation, no stripping of variation selectors —
    "🍎\\ufe0f" is not "🍎". Raises :class:`InvalidGuess`; the detail never echoes the
    offending value (it may be huge or not encodable).
    """
    if not isinstance(guess, (list, tuple)):
        raise InvalidGuess(f"guess must be a list of {length} emojis, got {_kind(guess)}")
    if len(guess) != length:
        raise InvalidGuess(f"guess must have exactly {length} emojis, got {len(guess)}")
    allowed = frozenset(palette)
    for i, item in enumerate(guess):
        if not isinstance(item, str):
            raise InvalidGuess(f"guess[{i}] must be a string, got {_kind(item)}")
        if item not in allowed:
            raise InvalidGuess(f"guess[{i}] is not one of the palette's emojis")
    return tuple(guess)


def new_secret(
    palette: Sequence[str] = DEFAULT_PALETTE,
    length: int = DEFAULT_LENGTH,
    rng: random.Random | None = None,
) -> tuple[str, ...]:
    """A fresh secret: ``length`` palette emojis drawn with repetition.

    Uses the OS CSPRNG (``secrets``) unless a seeded ``rng`` is given (tests): players
    must not be able to predict the next round's secret from earlier ones.
    """
    if not palette:
        raise ValueError("palette must not be empty")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if rng is None:
        return tuple(secrets.choice(palette) for _ in range(length))
    return tuple(rng.choice(palette) for _ in range(length))


def _kind(value: object) -> str:
    """A JSON-ish name for a value's type, for error details."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
