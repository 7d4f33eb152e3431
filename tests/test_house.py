"""The house's sizes, checked where the suite runs: no module of the product or the
benchmarks over 500 lines, echomq's front door small, and echomq's comments and docstrings
at most 15 % of its lines (the peers we measured keep 9-13 %: code says what, comments why)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

import echomq

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("echomq", "codemojex", "web", "bench", "harness")
MAX_LINES = 500
MAX_EXPORTS = 25
MAX_COMMENT_SHARE = 0.15


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def comment_lines(source: str) -> set[int]:
    """The lines of ``source`` that hold a comment or are part of a docstring."""
    lines = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def comment_share(package: str) -> tuple[int, int]:
    """(comment and docstring lines, all lines) over ``package``'s modules."""
    said = total = 0
    for path in modules(package):
        source = path.read_text()
        total += len(source.splitlines())
        said += len(comment_lines(source))
    return said, total


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_500_lines(package: str) -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules(package)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split by idea: {long}"


def test_echomq_front_door_is_small() -> None:
    assert len(echomq.__all__) <= MAX_EXPORTS, sorted(echomq.__all__)
    assert all(hasattr(echomq, name) for name in echomq.__all__)


def test_echomq_comments_say_why_in_few_lines() -> None:
    said, total = comment_share("echomq")
    assert said / total <= MAX_COMMENT_SHARE, f"{said} of {total} lines ({said / total:.1%})"


def test_comment_lines_counts_comments_and_docstrings() -> None:
    source = '"""Doc\n\nmore."""\nx = 1  # why\n\n\ndef f():\n    """One."""\n    return 2\n'
    assert comment_lines(source) == {1, 2, 3, 4, 8}
