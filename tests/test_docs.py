"""The docs hold together.

The API reference (mkdocs.yml, docs/api/) builds with warnings as errors: a docstring
mkdocstrings cannot read, a page naming an object that is gone or a broken link fails the
suite, as it would fail `uv run --group docs mkdocs build --strict`.

The public contract is docs/contract.md, in the repository: every citation of it, in any
file, names a section it has, and no file cites a contract outside the repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"

# The one form of a citation: the page's path, then one section ("§4") or a list of them
# ("§1, §4"). The path's dot is escaped, so this pattern's own source is no citation.
CITATION = re.compile(r"docs/contract\.md((?:,?\s*§[0-9]+[a-z]?)+)")
SECTION = re.compile(r"§([0-9]+[a-z]?)")
# The contract as it was cited before it lived here; written in two pieces so that this
# file does not cite it itself.
OUT_OF_REPO = re.compile("CONTRACT" + r"(?:\s*§|\.md)")
# What a checkout holds that is not its own (git ignores it), for a walk without git.
NOT_OURS = {".git", ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", ".hypothesis"}
SKIPPED = {ROOT / "bench" / "out", ROOT / "dist", ROOT / ".codemojex", ROOT / "reports"}


def repository_files() -> list[Path]:
    """Every file of the checkout that git tracks or would (untracked, not ignored); a
    walk that skips what is not ours where git cannot answer."""
    git = shutil.which("git")
    if git is not None:
        done = subprocess.run(
            [git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0:
            names = {n for n in done.stdout.decode("utf-8", "surrogateescape").split("\0") if n}
            return sorted(p for p in (ROOT / n for n in names) if p.is_file())
    found: list[Path] = []
    for top, dirs, files in os.walk(ROOT):
        here = Path(top)
        dirs[:] = [d for d in dirs if d not in NOT_OURS and here / d not in SKIPPED]
        found += (here / f for f in files)
    return sorted(found)


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # a picture, a binary: it cites nothing


def contract_sections() -> set[str]:
    """The sections docs/contract.md has: a stable anchor (``<a id="s4">``) right before a
    heading that carries the number (``## 4. …``, ``### 3b. …``)."""
    text = CONTRACT.read_text(encoding="utf-8")
    found = re.findall(r'<a id="s([0-9]+[a-z]?)"></a>\s*\n#{2,3} ([0-9]+[a-z]?)\. ', text)
    return {anchor for anchor, number in found if anchor == number}


def test_the_contract_has_each_section_under_its_stable_anchor() -> None:
    assert contract_sections() == {"1", "2", "3", "3b", "4", "5"}


def test_every_citation_of_the_contract_names_one_of_its_sections() -> None:
    sections = contract_sections()
    cited: set[str] = set()
    unknown: list[str] = []
    for path in repository_files():
        text = text_of(path)
        if text is None or "docs/contract.md" not in text:
            continue
        for match in CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for number in SECTION.findall(match.group(1)):
                cited.add(number)
                if number not in sections:
                    unknown.append(f"{path.relative_to(ROOT)}:{line}: §{number}")
    assert not unknown, "citations of sections docs/contract.md lacks:\n" + "\n".join(unknown)
    assert cited, "no file cites docs/contract.md by section: is the pattern still the one used?"


def test_no_file_cites_the_contract_outside_the_repository() -> None:
    old: list[str] = []
    for path in repository_files():
        text = text_of(path)
        if text is None:
            continue
        for match in OUT_OF_REPO.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            old.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not old, (
        "the contract is docs/contract.md: cite it as `docs/contract.md §N` in\n" + "\n".join(old)
    )


@pytest.mark.slow
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
        "registry": ["WorkerInfo", "workers"],
        "events": ["Tail", "Events"],
        "admin": ["dead_count", "dead_before", "worker_count"],
        "server": ["EmbeddedValkey", "check_durable"],
        "cli": ["ECHOMQ_URL"],
        "contract": ["Fencing", "lane_full", "catch_up_one"],  # docs/contract.md, linked in
    }
    for name, words in expected.items():
        text = page(name)
        missing = [w for w in words if w not in text]
        assert not missing, f"docs/api/{name}.md rendered without {missing}"
        # docs/api/_hooks/roles.py turned every Sphinx role into code (linked where it can)
        assert ":class:" not in text and ":meth:" not in text, name
    assert 'href="../consumer/#echomq.Consumer"' in page("registry")  # a role, linked
    assert "At-least-once delivery" in (site / "index.html").read_text(encoding="utf-8")
