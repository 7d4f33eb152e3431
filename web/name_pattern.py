"""The player-name rules of :mod:`codemojex.names`, stated as a JSON Schema ``pattern``.

``POST /api/players`` refuses names by grapheme (:func:`codemojex.names.validate_name`); the
OpenAPI document says so with a regular expression built here, from the same Unicode data
the server judges with (``unicodedata`` for categories, ``regex`` for the properties), so a
client or a fuzzer can tell a name the server takes from one it refuses. A name is a run of
units, at least one of them visible:

* a *space*: one space separator (Zs), nothing on it;
* a *letter*: one visible character (not a control, format, surrogate, unassigned, separator
  or combining character, nor one that draws nothing), followed by the characters that
  join it (at most :data:`~codemojex.names.MAX_MARKS_PER_GRAPHEME` combining marks, and
  the few non-mark characters Unicode glues onto the one before, such as skin tones);
* an *emoji sequence*: pictographs joined by U+200D ZERO WIDTH JOINER (the only format
  character allowed), each with its modifiers and variation selectors.

The expression approximates grapheme segmentation by these units: it agrees with the
server on every rule above, and may differ only on rare sequences the units do not model
(a character of Grapheme_Cluster_Break=Prepend, which takes the next one into its
grapheme; an Indic conjunct carrying more than three marks in all). Written with literal characters (no ``\\u{…}`` escapes, which
Python's ``re`` lacks), it reads the same in ECMA-262 with the ``u`` flag, Python and Rust.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable
from functools import cache

import regex

from codemojex.names import MAX_MARKS_PER_GRAPHEME

__all__ = ["name_patterns"]

_REFUSED = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
_JOINS = regex.compile(r"\p{Grapheme_Cluster_Break=Extend}|\p{Grapheme_Cluster_Break=SpacingMark}")
_EXTEND = regex.compile(r"\p{Grapheme_Cluster_Break=Extend}")
_PICTOGRAPHIC = regex.compile(r"\p{Extended_Pictographic}")
_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
# Hangul jamo and syllables join one another by GB6-GB8 of UAX #29.
_HANGUL = {
    name: regex.compile(rf"\p{{Grapheme_Cluster_Break={name}}}")
    for name in ("L", "V", "T", "LV", "LVT")
}
_BLANK = "\u2800"
_ZWJ = "\u200d"
_SPECIAL = frozenset("\\]-[^")


def _intervals(cps: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as runs ``(first, last)``."""
    out: list[tuple[int, int]] = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def _char(cp: int) -> str:
    ch = chr(cp)
    return "\\" + ch if ch in _SPECIAL else ch


def _class(cps: Iterable[int]) -> str:
    parts = []
    for low, high in _intervals(cps):
        if low == high:
            parts.append(_char(low))
        elif high == low + 1:
            parts.append(_char(low) + _char(high))
        else:
            parts.append(f"{_char(low)}-{_char(high)}")
    return "[" + "".join(parts) + "]"


def _kinds() -> dict[int, str]:
    """What each code point a name may hold is to a name: space, mark, joiner, blank,
    letter, or a Hangul jamo class (L, V, T, LV, LVT; ``-blank`` for the fillers). Refused
    code points are left out."""
    allowed = "".join(
        ch for ch in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(ch) not in _REFUSED
    )
    # One pass of each property over all the candidates at once, in regex's C loop.
    joins = set(_JOINS.findall(allowed))
    ignorable = set(_IGNORABLE.findall(allowed)) | {_BLANK}
    hangul = {ch: name for name, rx in _HANGUL.items() for ch in rx.findall(allowed)}
    kinds: dict[int, str] = {}
    for ch in allowed:
        category = unicodedata.category(ch)
        if category == "Zs":
            kind = "space"
        elif category.startswith("M"):
            if ch not in joins:
                continue  # a mark that never joins is always alone: refused
            kind = "mark"
        elif ch in joins:
            kind = "joiner"
        elif ch in hangul:
            kind = hangul[ch] + ("-blank" if ch in ignorable else "")
        elif ch in ignorable:
            kind = "blank"
        else:
            kind = "letter"
        kinds[ord(ch)] = kind
    return kinds


@cache
def name_patterns() -> tuple[str, str]:
    """Two expressions a name the server accepts matches (lengths apart: 1–32): the first,
    anchored, says what it is made of; the second that it holds more than spaces."""
    kinds = _kinds()
    text = "".join(map(chr, kinds))
    pictographic = set(_PICTOGRAPHIC.findall(text))
    extend = set(_EXTEND.findall(text))

    def of(*wanted: str, within: set[str] | None = None) -> str:
        return _class(
            cp
            for cp, kind in kinds.items()
            if kind in wanted and (within is None or chr(cp) in within)
        )

    space = of("space")
    letter = of("letter")
    mark = of("mark")
    joiner = of("joiner")
    pict = of("letter", within=pictographic)
    # In an emoji sequence only Extend characters may sit between a pictograph and the
    # joiner (a spacing mark there breaks the sequence, and the joiner is then alone).
    emoji_mark = of("mark", within=extend)
    emoji_joiner = of("joiner", within=extend)
    n = MAX_MARKS_PER_GRAPHEME
    tail = f"{joiner}*(?:{mark}{joiner}*){{0,{n}}}"
    emoji_link = f"(?:{emoji_joiner}|{_ZWJ}{pict})"
    emoji_tail = f"{emoji_link}*(?:{emoji_mark}{emoji_link}*){{0,{n}}}"
    # A Hangul syllable block (GB6-GB8), not opened by a filler (U+115F, U+1160 draw nothing).
    jl, jl_any = of("L"), of("L", "L-blank")
    jv, jv_any = of("V"), of("V", "V-blank")
    jt, lv, lvt = of("T"), of("LV"), of("LVT")
    vowel = f"(?:{jv_any}+|{lv}{jv_any}*|{lvt})"
    hangul = f"(?:{jl}{jl_any}*{vowel}?|{lv}{jv_any}*|{lvt}|{jv}{jv_any}*|{jt}){jt}*"
    visible = f"(?:(?:{letter}|{hangul}){tail}|{pict}{emoji_tail})"
    # A joining character opens a name only at its very start (after a space it would sit
    # on the space, which is refused).
    lead = f"{joiner}{tail}"
    made_of = f"^(?:{lead})?(?:{space}|{visible})*$"
    not_blank = "[^" + space[1:]
    return made_of, not_blank
