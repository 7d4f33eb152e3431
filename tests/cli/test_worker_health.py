"""A worker's health file (``CODEMOJEX_HEALTH_FILE``): touched while its loop runs and
Valkey answers it, left to age when Valkey is gone — what compose's health check reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from echomq.server import EmbeddedValkey
from harness.running import ROOT, wait_until

pytestmark = pytest.mark.slow


def test_the_health_file_is_fresh_while_valkey_answers_and_ages_without_it(tmp_path: Path) -> None:
    health = tmp_path / "health" / "worker"
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
    env.update(CODEMOJEX_HEALTH_FILE=str(health), CODEMOJEX_ADMIN_TOKEN="t" * 32)
    db = tmp_path / "x.db"
    subprocess.run(
        [sys.executable, "-m", "codemojex", "migrate", "--database-url", f"sqlite:///{db}"],
        check=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "codemojex",
            "worker",
            "--valkey-url",
            server.url,
            "--database-url",
            f"sqlite:///{db}",
            "--data-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(health.exists, 20, "the health file")
        first = health.stat().st_mtime
        wait_until(lambda: health.stat().st_mtime > first, 10, "a fresh touch")
        server.stop()
        time.sleep(1.0)  # a touch may have been under way
        stale = health.stat().st_mtime
        time.sleep(5.0)
        assert health.stat().st_mtime == stale  # no answer from Valkey: the file ages
        assert worker.poll() is None  # the worker itself waits for Valkey to return
    finally:
        worker.kill()
        worker.wait(10)
        server.stop()
