"""Fixtures for the command-line tests: ``up`` as a real process tree, always reaped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.running import Up


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def start_up(data_dir: Path) -> Iterator[Callable[..., Up]]:
    """``start_up("--workers", "2")`` -> a ready ``Up`` on ``data_dir``; torn down (SIGKILL,
    every descendant it ever had) even when the test fails half-way."""
    started: list[Up] = []

    def start(*args: str) -> Up:
        up = Up(data_dir, *args)
        started.append(up)
        return up.start().wait_ready()

    try:
        yield start
    finally:
        for up in started:
            up.kill_everything()
