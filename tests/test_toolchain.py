"""The house rules, checked where the suite runs: ruff (lint and format) and mypy --strict
clean on the shipped packages, with the versions pinned in the dev group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["echomq", "codemojex", "web", "harness"]

pytestmark = pytest.mark.slow


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ruff_lint_is_clean() -> None:
    done = _run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean() -> None:
    done = _run("ruff", "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_is_clean() -> None:
    done = _run("mypy", *PACKAGES)
    assert done.returncode == 0, done.stdout + done.stderr
