"""A private copy of the source tree for a mutation run.

Mutation runs edit source files, so they never run in the checkout a developer (or a
colleague) is working in: they copy the tree to a directory of their own first, either
the tracked files as they are on disk now (the default: what you are about to commit) or
one revision (``git archive``), and mutate only the copy.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "out"


def copy_tree(dest: Path, rev: str | None = None, root: Path = ROOT) -> Path:
    """Copy ``root``'s tracked files (or revision ``rev`` of them) into a fresh ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if rev is not None:
        with tempfile.TemporaryFile() as tar:
            subprocess.run(["git", "-C", str(root), "archive", rev], stdout=tar, check=True)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as archive:
                archive.extractall(dest, filter="data")
        return dest
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = root / name.decode()
        if not src.is_file():  # deleted in the working tree but still in the index
            continue
        target = dest / name.decode()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


def describe(rev: str | None, root: Path = ROOT) -> str:
    """What a run mutated, for its report: a commit's short hash (resolved when the run
    starts: HEAD moves while a long run goes on), or the working tree."""
    if rev is None:
        return "working tree"
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", rev],
        check=False,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or rev
