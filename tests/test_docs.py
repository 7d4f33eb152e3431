"""The API reference (mkdocs.yml, docs/api/) builds with warnings as errors (issue 23,
item 6): a docstring mkdocstrings cannot read, a page naming an object that is gone or a
broken link fails the suite, as it would fail `uv run --group docs mkdocs build --strict`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_the_api_reference_builds_strict_and_covers_the_public_api(tmp_path: Path) -> None:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    assert uv, "uv is not on PATH (the project is run with uv: see the README)"
    site = tmp_path / "site"
    done = subprocess.run(
        # --frozen: the lock as it is; a suite never re-locks or re-syncs the venv its
        # other worker is running from (the docs group is installed by default anyway)
        [uv, "run", "--frozen", "--group", "docs", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "WARNING" not in log, log

    def page(name: str) -> str:
        return (site / name / "index.html").read_text(encoding="utf-8")

    # Each page rendered its objects (a page whose ::: block rendered nothing would pass
    # the build): a name from each, as mkdocstrings writes it into the page.
    expected = {
        "queue": ["Queue", "stats", "Settings"],
        "jobs": ["enqueue", "complete", "retry_dead"],
        "lanes": ["Lanes", "submit"],
        "consumer": ["Consumer", "lease_ms", "timeout_ms"],
        "claim": ["Claim", "JobInfo", "Token"],
        "errors": ["EchoMQError", "JobNotFound", "Unavailable"],
        "hooks": ["Hooks", "around_handler"],
        "registry": ["WorkerRecord", "workers"],
        "events": ["Tail", "Events"],
        "admin": ["dead_count", "dead_before", "worker_count"],
        "server": ["EmbeddedValkey", "check_durable"],
        "cli": ["ECHOMQ_URL"],
    }
    for name, words in expected.items():
        text = page(name)
        missing = [w for w in words if w not in text]
        assert not missing, f"docs/api/{name}.md rendered without {missing}"
        # docs/api/_hooks/roles.py turned every Sphinx role into code (linked where it can)
        assert ":class:" not in text and ":meth:" not in text, name
    assert 'href="../consumer/#echomq.Consumer"' in page("registry")  # a role, linked
    assert "At-least-once delivery" in (site / "index.html").read_text(encoding="utf-8")
