"""The game meets EchoMQ only through its public API (issue 23, item 2): no module outside
``echomq/`` reads the queue's key layout (``queue.keys``, ``Keys``) or replaces an EchoMQ
method at run time. What the game needs that EchoMQ lacked became a public read
(``echomq.admin``, ``echomq.registry``, ``Events.follow``/``Tail``) or a hook
(``echomq.Hooks``).

Scanned: the shipped programs, ``codemojex/`` and ``web/``. Tests and benchmarks look at
keys on purpose (they check what the scripts wrote), so they are not."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.events import Events
from echomq.jobs import Jobs
from echomq.lanes import Lanes
from echomq.stalled import Stalled

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("codemojex", "web")
# Every method of EchoMQ's objects: assigning to an attribute of that name replaces one.
_CLASSES = (
    echomq.Queue,
    Jobs,
    Lanes,
    Stalled,
    Events,
    echomq.Consumer,
    echomq.Partitioned,
    echomq.PartitionedConsumer,
)
METHODS = frozenset(
    name
    for cls in _CLASSES
    for name, member in inspect.getmembers(cls)
    if callable(member) and not name.startswith("__")
)
# The sub-objects of a Queue whose methods are the transitions.
PARTS = frozenset({"jobs", "lanes", "stalled", "events", "runner"})


def reach_ins(source: str, filename: str = "<src>") -> Iterator[str]:
    """Each use of the key layout and each replaced EchoMQ method in ``source``."""
    tree = ast.parse(source, filename)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}  # d.keys()
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr == "keys" and id(node) not in called:
            yield f"{where}: .keys (the queue's key layout)"
        elif isinstance(node, ast.Name) and node.id == "Keys":
            yield f"{where}: Keys (the queue's key layout)"
        elif isinstance(node, ast.ImportFrom) and node.module in {"echomq.keys", "echomq.scripts"}:
            yield f"{where}: imports {node.module}"
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if not isinstance(t, ast.Attribute):
                    continue
                on_part = isinstance(t.value, ast.Attribute) and t.value.attr in PARTS
                if on_part or (t.attr in METHODS and not _is_self(t.value)):
                    yield f"{where}: assigns {ast.unparse(t)} (replaces a method)"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in METHODS
        ):
            yield f"{where}: setattr(..., {node.args[1].value!r}) (replaces a method)"


def _is_self(node: ast.expr) -> bool:
    """``self.x = …``: a class setting its own attribute, not reaching into EchoMQ."""
    return isinstance(node, ast.Name) and node.id in {"self", "cls"}


def _sources() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py"))


def test_nothing_outside_echomq_reads_its_keys_or_replaces_its_methods() -> None:
    found = [
        hit
        for path in _sources()
        for hit in reach_ins(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "n = await conn.zcard(queue.keys.dead)",
        "k = q.keys",
        "from echomq.keys import Keys",
        "key = Keys('guesses').events",
        "queue.jobs.complete_encoded = wrapper",
        "partition.jobs.extend_many = extend_many",
        "q.lanes.submit = submit",
        "consumer.run = other",
        "setattr(queue.jobs, 'extend_many', wrapped)",
        "monkeypatch.setattr(q, 'stats', fake)",
    ],
)
def test_the_scan_finds_each_kind_of_reach_in(source: str) -> None:
    assert list(reach_ins(source)), source


def test_the_scan_leaves_public_use_alone() -> None:
    ok = """
q = echomq.Queue(conn, "guesses", hooks=[echomq.Hooks(after_extend=crash)])
q.add_hooks(echomq.Hooks(around_complete=spans))
self.stop = asyncio.Event()
names = list(d.keys())
n = await echomq.admin.dead_count(q)
"""
    assert list(reach_ins(ok)) == []
