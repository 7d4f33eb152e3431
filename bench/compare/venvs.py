"""A venv per peer under a cache dir (``~/.cache/codemojex/bench-venvs/<peer>-<version>`` by
default, outside the source tree: the peers' packages are no modules of ours), made with
``uv venv`` and ``uv pip install`` of the pinned requirements, and kept: a venv whose stamp
file records the same requirements is used as it is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.compare.pins import Peer

CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "codemojex" / "bench-venvs"
)
STAMP = ".bench-compare-requirements"


class VenvError(RuntimeError):
    """A peer's venv could not be made: the registry unreachable, a pin gone, no uv."""


def python_of(peer: Peer, cache: Path = CACHE) -> Path:
    """The interpreter a peer's driver runs on: ours for EchoMQ, its own venv's for a peer."""
    if peer.ours:
        return Path(sys.executable)
    return cache / peer.venv_name / "bin" / "python"


def is_ready(peer: Peer, cache: Path = CACHE) -> bool:
    if peer.ours:
        return True
    stamp = cache / peer.venv_name / STAMP
    return stamp.is_file() and stamp.read_text() == "\n".join(peer.requirements)


def ensure(peer: Peer, cache: Path = CACHE, *, timeout: float = 600.0) -> Path:
    """The peer's interpreter, its venv made first if it is missing or out of date."""
    if is_ready(peer, cache):
        return python_of(peer, cache)
    uv = shutil.which("uv")
    if uv is None:
        raise VenvError("uv not found on PATH: it makes the peers' venvs")
    venv = cache / peer.venv_name
    shutil.rmtree(venv, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    # The same interpreter as ours, so the Python version is not one of the differences.
    base = getattr(sys, "_base_executable", sys.executable)
    for argv in (
        [uv, "venv", "-q", "--python", base, str(venv)],
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *peer.requirements],
    ):
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise VenvError(f"{peer.key}: `{' '.join(argv[:3])}` timed out") from e
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-1500:]
            raise VenvError(f"{peer.key}: `{' '.join(argv[:3])} ...` failed:\n{tail}")
    (venv / STAMP).write_text("\n".join(peer.requirements))
    return python_of(peer, cache)
