"""Real headless Chromium (Debian's package) driven by Playwright, against a real ``up``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module scope, not session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and the asyncio tests that follow need the thread back.
    if not os.path.exists(CHROMIUM):
        message = "Chromium not installed: apt-get install -y chromium"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


# The `up` process-tree fixtures live with the command-line tests.
from tests.cli.conftest import data_dir, start_up  # noqa: F401
