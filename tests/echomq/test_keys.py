"""Key names are built in two places, ``echomq/keys.py`` (Python) and the scripts (from
``KEYS[1]``, the prefix): every name a script builds must be one ``Keys`` builds too, so
the two cannot drift apart unnoticed (an operator's tool or a test reading the wrong key
would see an empty queue)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from echomq.keys import Keys

LUA = Path(__file__).resolve().parents[2] / "echomq" / "lua"
BUILT = re.compile(r"PREFIX \.\. '([a-z_:]+)'")


def _python_suffixes() -> set[str]:
    keys = Keys("q")
    out: set[str] = set()
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in ("name", "prefix"):
            continue
        if isinstance(member, property):
            value = getattr(keys, name)
        else:
            arity = len(inspect.signature(member).parameters) - 1
            value = getattr(keys, name)(*["X"] * arity)
        assert value.startswith(keys.prefix), name
        out.add(value[len(keys.prefix) :])
    return out


def _lua_suffixes() -> set[str]:
    found: set[str] = set()
    for path in sorted(LUA.rglob("*.lua")):
        found |= set(BUILT.findall(path.read_text()))
    return found


def test_every_key_a_script_builds_is_a_key_python_builds() -> None:
    python = _python_suffixes()
    lua = _lua_suffixes()
    assert len(lua) >= 15  # the pattern still finds the scripts' keys
    for suffix in lua:
        # 'job:' .. id in Lua is Keys.job("X") -> "job:X" in Python
        expected = f"{suffix}X" if suffix.endswith(":") else suffix
        assert expected in python, f"a script builds {suffix!r}, echomq/keys.py does not"


def test_the_prefix_carries_the_queue_hash_tag() -> None:
    assert Keys("guesses").prefix == "emq:{guesses}:"
