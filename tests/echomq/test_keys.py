"""Key names are built in two places, ``echomq/keys.py`` (Python) and the scripts (the
keys named by data, from ``KEYS[1]``, the prefix): every name a script builds must be one
``Keys`` builds too, so the two cannot drift apart unnoticed (an operator's tool or a test
reading the wrong key would see an empty queue). Every other key a script touches comes in
``KEYS``: each script declares the static keys its code and its helpers use, no more."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from echomq.keys import SCRIPT_KEYS, Keys

LUA = Path(__file__).resolve().parents[2] / "echomq" / "lua"
BUILT = re.compile(r"PREFIX \.\. '([a-z_:]+)'")


def _python_suffixes() -> set[str]:
    keys = Keys("q")
    out: set[str] = set()
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in ("name", "prefix", "script_keys"):
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
    assert len(lua) >= 4  # the pattern still finds the keys built from data (job:, lane: …)
    for suffix in lua:
        # 'job:' .. id in Lua is Keys.job("X") -> "job:X" in Python
        expected = f"{suffix}X" if suffix.endswith(":") else suffix
        assert expected in python, f"a script builds {suffix!r}, echomq/keys.py does not"


def test_the_prefix_carries_the_queue_hash_tag() -> None:
    assert Keys("guesses").prefix == "emq:{guesses}:"


# -- every key a script touches comes in KEYS ------------------------------------------------

ONE_LINE = re.compile(r"^local function (\w+)\(.*\bend$", re.MULTILINE)
FUNCTION = re.compile(r"^local function (\w+)\(.*?^end$", re.DOTALL | re.MULTILINE)
K_REF = re.compile(r"\bK_[A-Z_]+\b")
CALL = re.compile(r"\b(\w+)\s*\(")
DECLARED = re.compile(
    r"^local ((?:K_[A-Z_]+, )*K_[A-Z_]+) = (?:unpack\(KEYS, |KEYS\[)", re.MULTILINE
)


def _code(text: str) -> str:
    text = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.DOTALL)
    return re.sub(r"--[^\n]*", "", text)


def _helpers() -> dict[str, tuple[set[str], set[str]]]:
    """Each helper of the includes: (the K_ keys it names, the functions it calls)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for path in sorted((LUA / "include").glob("*.lua")):
        text = _code(path.read_text())
        for pattern in (ONE_LINE, FUNCTION):
            for m in pattern.finditer(text):
                out[m.group(1)] = (set(K_REF.findall(m.group(0))), set(CALL.findall(m.group(0))))
            text = pattern.sub("", text)
        assert not K_REF.search(text), f"{path.name} names a key outside its functions"
    return out


def _used(script: Path, helpers: dict[str, tuple[set[str], set[str]]]) -> set[str]:
    """The K_ keys the script's code uses, its own and those of every helper it calls."""
    code = _code(script.read_text())
    used, seen = set(K_REF.findall(code)), set()
    todo = set(CALL.findall(code)) & helpers.keys()
    while todo:
        name = todo.pop()
        seen.add(name)
        keys, calls = helpers[name]
        used |= keys
        todo |= (calls & helpers.keys()) - seen
    return used


def _lua_name(keys: Keys, attr: str) -> str:
    return "K_" + getattr(keys, attr)[len(keys.prefix) :].upper()


def test_every_script_declares_exactly_the_static_keys_it_touches() -> None:
    helpers = _helpers()
    assert {"place", "lease_all", "stall", "emit", "pulse"} <= helpers.keys()
    keys = Keys("q")
    scripts = sorted(LUA.glob("*.lua"))
    assert {p.stem for p in scripts} == set(SCRIPT_KEYS)
    for path in scripts:
        declared = [n for d in DECLARED.findall(path.read_text()) for n in d.split(", ")]
        static = [_lua_name(keys, attr) for attr in SCRIPT_KEYS[path.stem]]
        # the static keys in SCRIPT_KEYS' order (the order Keys.script_keys sends them)
        assert [n for n in declared if n in static] == static, path.name
        used = _used(path, helpers)
        assert used <= set(declared), f"{path.name} uses {sorted(used - set(declared))} undeclared"
        assert set(static) <= used, f"{path.name} declares {sorted(set(static) - used)} unused"


def test_a_call_sends_its_own_keys_then_the_static_ones() -> None:
    keys = Keys("guesses")
    assert keys.script_keys("extend", keys.job("J")) == [
        "emq:{guesses}:",
        "emq:{guesses}:job:J",
        "emq:{guesses}:active",
        "emq:{guesses}:refused",
    ]
