"""Fixtures for the load tests: ``codemojex up`` as a real process tree (tests/cli's)."""

from __future__ import annotations

from tests.cli.conftest import data_dir, start_up

__all__ = ["data_dir", "start_up"]
