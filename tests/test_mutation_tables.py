"""The mutation tables under tools/mutation/ still fit the tree (fast; the runs themselves
are slow and live outside the suite: docs/testing.md).

A Lua mutation whose text no longer occurs in its script would silently test nothing, and
a mutmut group naming a moved test file would run no tests; both fail here instead, on
the commit that moved the code.
"""

from __future__ import annotations

from pathlib import Path

from tools.mutation.lua_mutants import LUA, MUTATIONS, check_table
from tools.mutation.run import GROUPS

ROOT = Path(__file__).resolve().parent.parent

# The core issue 15 puts under mutation testing; every module of it belongs to a group.
CORE = ["codemojex/rules.py", "codemojex/store/scores.py", "codemojex/guesses.py", "web/hub.py"]
# Areas whose Lua mutants must all be killed (docs/testing.md).
GUARDED = {"fencing", "lane order", "owner filtering", "backoff"}


def test_every_lua_mutation_still_applies_to_the_current_source() -> None:
    assert check_table() == []


def test_each_lua_mutation_changes_its_script() -> None:
    for m in MUTATIONS:
        source = (ROOT / LUA / m.file).read_text()
        assert source.replace(m.find, m.replace, 1) != source, m.id


def test_the_lua_table_covers_every_guarded_area() -> None:
    assert GUARDED <= {m.area for m in MUTATIONS}


def test_every_core_module_is_in_a_mutmut_group_with_existing_tests() -> None:
    echomq = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "echomq").rglob("*.py")
        if p.name not in ("__init__.py", "settings.py")  # no functions: nothing to mutate
    )
    grouped = [m for g in GROUPS.values() for m in g.modules]
    assert sorted(set(CORE + echomq) - set(grouped)) == []
    assert len(grouped) == len(set(grouped)), "a module in two groups"
    for name, g in GROUPS.items():
        for path in g.modules + g.tests:
            assert (ROOT / path).is_file(), (name, path)
