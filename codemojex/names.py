"""Player names: text every other player sees, so judged as a reader sees it.

A name is split into graphemes (what a reader takes for one character: ``regex``'s ``\\X``,
Unicode's extended grapheme clusters) and each one must be visible on its own:

* no control, format, surrogate, unassigned or line/paragraph-separator code point
  (categories Cc, Cf, Cs, Cn, Zl, Zp) — except the zero-width joiner *inside* an emoji
  sequence (👨‍👩‍👧 is one emoji drawn from three, joined by U+200D);
* no grapheme that draws nothing: a default-ignorable base (U+3164 HANGUL FILLER and its
  kin are letters that render as nothing) or the Braille blank U+2800;
* no combining mark without a base of its own (a lone mark, or marks piled on a space),
  and at most :data:`MAX_MARKS_PER_GRAPHEME` marks on one base, so a name cannot grow
  into the lines above and below it;
* at least one grapheme that is not a space.

The length limit stays in code points (1–32, docs/contract.md §4). Nothing is cleaned or
normalised silently: a name that is not acceptable as given is refused.
"""

from __future__ import annotations

import unicodedata

import regex

from codemojex.errors import InvalidName

__all__ = ["MAX_MARKS_PER_GRAPHEME", "NAME_MAX_CHARS", "validate_name"]

NAME_MAX_CHARS = 32
MAX_MARKS_PER_GRAPHEME = 3  # é needs one, Vietnamese ệ two, Thai tone marks up to three

# Controls (Cc), invisible format characters (Cf: zero-width spaces, bidi overrides — they
# let two names look alike or scramble a page), surrogates (Cs: not encodable in UTF-8),
# unassigned code points (Cn: their meaning may change later) and the line/paragraph
# separators (Zl, Zp: they break a one-line name).
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
_CATEGORY_WORDS = {
    "Cc": "control",
    "Cf": "format",
    "Cs": "surrogate",
    "Cn": "unassigned",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}
_ZWJ = "\u200d"
_BLANK_SYMBOLS = frozenset({"\u2800"})  # a symbol (So) whose glyph is empty

_GRAPHEME = regex.compile(r"\X")
_PICTOGRAPHIC = regex.compile(r"\p{Extended_Pictographic}")
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")


def validate_name(name: object) -> str:
    """Return ``name`` unchanged if it is an acceptable player name, else raise
    :class:`InvalidName` saying what is wrong (without echoing the name)."""
    if not isinstance(name, str):
        raise InvalidName(f"name must be a string, got {type(name).__name__}")
    if not 1 <= len(name) <= NAME_MAX_CHARS:
        raise InvalidName(f"name must be 1-{NAME_MAX_CHARS} characters, got {len(name)}")
    # Surrogates first: nothing after this point need cope with text that is not Unicode.
    for i, ch in enumerate(name):
        if unicodedata.category(ch) == "Cs":
            raise _refused_code_point(i, ch, "Cs")
    visible = False
    at = 0
    for grapheme in _GRAPHEME.findall(name):
        _check_grapheme(grapheme, at)
        visible = visible or not grapheme.isspace()
        at += len(grapheme)
    if not visible:
        raise InvalidName("name must not be blank")
    return name


def _check_grapheme(g: str, at: int) -> None:
    for i, ch in enumerate(g):
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES and not _joins_emoji(g, i):
            raise _refused_code_point(at + i, ch, category)
    base = g[0]
    base_category = unicodedata.category(base)
    if base_category.startswith("M"):
        raise InvalidName(f"name[{at}] is a combining mark with no character to sit on")
    if base.isspace() and len(g) > 1:
        raise InvalidName(f"name[{at}] is a space with marks on it")
    if base in _BLANK_SYMBOLS or _IGNORABLE.match(base):
        raise InvalidName(
            f"name[{at}] is U+{ord(base):04X}, which draws nothing; "
            "invisible characters are not allowed"
        )
    marks = sum(1 for ch in g if unicodedata.category(ch).startswith("M"))
    if marks > MAX_MARKS_PER_GRAPHEME:
        raise InvalidName(
            f"name[{at}] carries {marks} combining marks; at most "
            f"{MAX_MARKS_PER_GRAPHEME} per character"
        )


def _joins_emoji(g: str, i: int) -> bool:
    """A zero-width joiner between two pictographs of one emoji sequence."""
    return (
        g[i] == _ZWJ
        and 0 < i < len(g) - 1
        and bool(_PICTOGRAPHIC.match(g[0]))
        and bool(_PICTOGRAPHIC.match(g[i + 1]))
    )


def _refused_code_point(i: int, ch: str, category: str) -> InvalidName:
    return InvalidName(
        f"name[{i}] is U+{ord(ch):04X}, a {_CATEGORY_WORDS[category]} character; "
        "control, format and invisible characters are not allowed"
    )
