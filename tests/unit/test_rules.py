"""The game rules: feedback, points, validation (docs/contract.md §1)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemojex.errors import CodemojexError, InvalidGuess, InvalidName
from codemojex.rules import (
    DEFAULT_LENGTH,
    DEFAULT_PALETTE,
    Feedback,
    feedback,
    new_secret,
    points_for,
    round_points,
    validate_guess,
    validate_name,
)

emoji = st.sampled_from(DEFAULT_PALETTE)


@st.composite
def secret_and_guess(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    length = draw(st.integers(min_value=1, max_value=8))
    code = st.lists(emoji, min_size=length, max_size=length)
    return draw(code), draw(code)


# --- feedback -------------------------------------------------------------------------


def test_feedback_examples() -> None:
    a, b, c, d = DEFAULT_PALETTE[:4]
    assert feedback([a, b, c, d], [a, b, c, d]) == Feedback(4, 0, True)
    assert feedback([a, b, c, d], [d, c, b, a]) == Feedback(0, 4, False)
    assert feedback([a, a, b, b], [a, b, a, c]) == Feedback(1, 2, False)
    # Repetitions count only as often as they occur in the secret.
    assert feedback([a, b, c, d], [a, a, a, a]) == Feedback(1, 0, False)
    assert feedback([a, a, a, b], [b, b, a, a]) == Feedback(1, 2, False)


def test_feedback_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        feedback(["🍎"] * 4, ["🍎"] * 3)


@given(secret_and_guess())
def test_exact_plus_near_never_exceeds_length(pair: tuple[list[str], list[str]]) -> None:
    secret, guess = pair
    fb = feedback(secret, guess)
    assert 0 <= fb.exact <= len(secret)
    assert 0 <= fb.near
    assert fb.exact + fb.near <= len(secret)


@given(secret_and_guess())
def test_feedback_is_symmetric_in_secret_and_guess(pair: tuple[list[str], list[str]]) -> None:
    secret, guess = pair
    assert feedback(secret, guess) == feedback(guess, secret)


@given(secret_and_guess())
def test_solved_iff_every_emoji_is_exact(pair: tuple[list[str], list[str]]) -> None:
    secret, guess = pair
    fb = feedback(secret, guess)
    assert fb.solved == (fb.exact == len(secret))
    assert fb.solved == (secret == guess)
    if fb.solved:
        assert fb.near == 0


@given(secret_and_guess(), st.randoms(use_true_random=False))
def test_total_matches_are_invariant_under_permuting_the_guess(
    pair: tuple[list[str], list[str]], rnd: random.Random
) -> None:
    secret, guess = pair
    shuffled = guess[:]
    rnd.shuffle(shuffled)
    before, after = feedback(secret, guess), feedback(secret, shuffled)
    assert before.exact + before.near == after.exact + after.near


@given(secret_and_guess(), st.randoms(use_true_random=False))
def test_feedback_is_invariant_under_permuting_both(
    pair: tuple[list[str], list[str]], rnd: random.Random
) -> None:
    secret, guess = pair
    order = list(range(len(secret)))
    rnd.shuffle(order)
    permuted = feedback([secret[i] for i in order], [guess[i] for i in order])
    assert permuted == feedback(secret, guess)


@given(st.lists(emoji, min_size=1, max_size=8))
def test_the_secret_solves_itself(secret: list[str]) -> None:
    assert feedback(secret, secret) == Feedback(len(secret), 0, True)


# --- points ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "solved", "points"),
    [
        (0, True, 110),
        (1, True, 100),
        (5, True, 60),
        (9, True, 20),
        (10, True, 10),
        (11, True, 10),
        (1000, True, 10),
        (0, False, 0),
        (7, False, 0),
    ],
)
def test_points_examples(seq: int, solved: bool, points: int) -> None:
    assert points_for(seq, solved) == points


@given(st.integers(min_value=0, max_value=10_000))
def test_a_solve_always_pays_at_least_the_floor_and_earlier_pays_more(seq: int) -> None:
    assert points_for(seq, True) == max(10, 110 - 10 * seq)
    assert points_for(seq, True) >= 10
    assert points_for(seq, True) <= points_for(max(0, seq - 1), True)
    assert points_for(seq, False) == 0


def test_points_refuse_a_negative_seq() -> None:
    with pytest.raises(ValueError):
        points_for(-1, True)


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=20), st.randoms())
def test_round_points_are_the_max_and_ignore_order(
    guesses: list[tuple[int, bool]], rnd: random.Random
) -> None:
    expected = max((points_for(s, ok) for s, ok in guesses), default=0)
    shuffled = guesses[:]
    rnd.shuffle(shuffled)
    assert round_points(guesses) == round_points(shuffled) == expected


def test_round_points_count_the_earliest_solve_and_mashing_never_pays() -> None:
    assert round_points([]) == 0
    assert round_points([(0, False), (1, False)]) == 0
    assert round_points([(0, False), (1, True), (2, True), (3, False)]) == 100
    assert round_points([(12, True), (3, True)]) == 80


# --- validate_guess ---------------------------------------------------------------------


@given(st.lists(emoji, min_size=DEFAULT_LENGTH, max_size=DEFAULT_LENGTH))
def test_a_list_of_palette_emojis_is_accepted(guess: list[str]) -> None:
    assert validate_guess(guess) == tuple(guess)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "🍎🍌🍇🍒",
        42,
        {"0": "🍎"},
        [],
        ["🍎", "🍌", "🍇"],
        ["🍎", "🍌", "🍇", "🍒", "🍑"],
        ["🍎", "🍌", "🍇", 1],
        ["🍎", "🍌", "🍇", None],
        ["🍎", "🍌", "🍇", ["🍒"]],
        ["🍎", "🍌", "🍇", True],
        ["🍎", "🍌", "🍇", "🍍"],  # not in the palette
        ["🍎", "🍌", "🍇", "🍎\ufe0f"],  # variation selector: not the same string
        ["🍎", "🍌", "🍇", " 🍎"],
        ["🍎", "🍌", "🍇", ""],
        ["🍎", "🍌", "🍇", "🍎🍎"],
        ["🍎", "🍌", "🍇", "\ud83c"],  # lone surrogate
        ["🍎", "🍌", "🍇", "x" * 100_000],
    ],
)
def test_malformed_guesses_are_refused_with_a_clear_detail(bad: object) -> None:
    with pytest.raises(InvalidGuess) as info:
        validate_guess(bad)
    assert info.value.code == "invalid_guess" and info.value.status == 400
    assert "guess" in info.value.detail
    assert len(info.value.detail) < 200  # never echoes the (possibly huge) input
    info.value.detail.encode("utf-8")  # always encodable


def test_guess_validation_follows_the_round_palette_and_length() -> None:
    palette = ("a", "b")
    assert validate_guess(["a", "b", "a"], palette, 3) == ("a", "b", "a")
    with pytest.raises(InvalidGuess):
        validate_guess(["a", "b", "🍎"], palette, 3)
    with pytest.raises(InvalidGuess):
        validate_guess(["a", "b"], palette, 3)


# --- validate_name ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "Ada", "x" * 32, "🍎 eater", "Zoë", "李小龙", "❤️ fan", "a b", "O'Brien"]
)
def test_acceptable_names_are_returned_unchanged(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "bad",
    [
        None,
        42,
        b"ada",
        ["ada"],
        "",
        "x" * 33,
        "🍎" * 33,
        " ",
        "   \t",
        "ada\n",
        "ada\x00",
        "\x1b[31mred",
        "a\u200bb",  # zero-width space (Cf)
        "\u202eevil",  # right-to-left override (Cf)
        "\ufeffbom",  # byte-order mark (Cf)
        "a\u2028b",  # line separator (Zl)
        "a\u2029b",  # paragraph separator (Zp)
        "\ud83c",  # lone high surrogate (Cs)
        "ab\udc00",  # lone low surrogate (Cs)
        "a\u0378b",  # unassigned (Cn)
        "a\x7f",  # DEL (Cc)
        "a\x85",  # NEL (Cc)
    ],
)
def test_unacceptable_names_are_refused_not_cleaned(bad: object) -> None:
    with pytest.raises(InvalidName) as info:
        validate_name(bad)
    assert info.value.code == "invalid_body" and info.value.status == 400
    info.value.detail.encode("utf-8")


# --- new_secret -----------------------------------------------------------------------


def test_new_secret_draws_length_palette_emojis() -> None:
    for _ in range(50):
        secret = new_secret()
        assert len(secret) == DEFAULT_LENGTH
        assert set(secret) <= set(DEFAULT_PALETTE)
    assert new_secret(("a",), 6) == ("a",) * 6


def test_new_secret_is_reproducible_with_a_seeded_rng() -> None:
    assert new_secret(rng=random.Random(7)) == new_secret(rng=random.Random(7))


def test_new_secret_draws_with_repetition() -> None:
    seen_repeat = any(len(set(new_secret(rng=random.Random(i)))) < 4 for i in range(50))
    assert seen_repeat


def test_new_secret_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        new_secret((), 4)
    with pytest.raises(ValueError):
        new_secret(DEFAULT_PALETTE, 0)


# --- errors -------------------------------------------------------------------------------


def test_every_error_carries_its_contract_code_and_status() -> None:
    from codemojex import errors

    expected = {
        "InvalidGuess": ("invalid_guess", 400),
        "InvalidName": ("invalid_body", 400),
        "InvalidBody": ("invalid_body", 400),
        "RoundClosed": ("round_closed", 409),
        "RoundNotFound": ("not_found", 404),
        "JobNotFound": ("not_found", 404),
        "LaneFull": ("lane_full", 429),
        "IdempotencyConflict": ("idempotency_conflict", 409),
        "Conflict": ("conflict", 409),
        "NotYourGuess": ("forbidden", 403),
        "Unauthorized": ("unauthorized", 401),
        "Unavailable": ("unavailable", 503),
    }
    for name, (code, status) in expected.items():
        cls = getattr(errors, name)
        assert issubclass(cls, CodemojexError)
        assert (cls.code, cls.status) == (code, status), name
        err = cls()
        assert err.body() == {"error": code, "detail": err.detail} and err.detail


def test_retry_after_errors_carry_whole_seconds() -> None:
    from codemojex.errors import LaneFull, Unavailable

    full = LaneFull(3)
    assert full.retry_after_s == 3 and full.headers() == {"Retry-After": "3"}
    assert LaneFull(0.2).headers() == {"Retry-After": "1"}  # type: ignore[arg-type]
    assert Unavailable("valkey is down", retry_after_s=2).headers() == {"Retry-After": "2"}
    assert InvalidGuess("x").headers() == {}


# --- names as a reader sees them (graphemes) ----------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "👨\u200d👩\u200d👧",  # a family: three emojis joined by ZWJ, one grapheme
        "👩🏽\u200d💻 coder",  # skin tone, then ZWJ
        "🏳️\u200d🌈",  # flag with VS16 then ZWJ
        "Nguyễn",  # two marks on one base
        "e\u0301clair",  # a decomposed é
    ],
)
def test_emoji_sequences_and_ordinary_marks_are_accepted(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "bad",
    [
        "\u3164",  # HANGUL FILLER: a letter (Lo) that draws nothing
        "\u3164\u3164ada",
        "\u2800",  # BRAILLE PATTERN BLANK
        "ada\u2800",
        "\uffa0",  # HALFWIDTH HANGUL FILLER
        "\u115f",  # HANGUL CHOSEONG FILLER
        "\u0301",  # a lone combining mark
        "\u0301ada",
        " \u0301",  # a mark on a space
        "a" + "\u0301" * 31,  # 31 stacked marks
        "a" + "\u0300\u0301\u0302\u0303",  # four marks on one base
        "a\u200db",  # ZWJ between letters is still a format character
        "\u200d👩",  # ZWJ with nothing before it
        "👩\u200d",  # ZWJ with nothing after it
    ],
)
def test_invisible_and_blank_looking_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidName):
        validate_name(bad)
