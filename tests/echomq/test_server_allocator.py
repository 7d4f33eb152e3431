"""The embedded Valkey's allocator: jemalloc preloaded when asked (or found), the build's own
otherwise, and the memory bound still holding under jemalloc. Real servers, read through
/proc/PID/maps, since INFO's mem_allocator names only the build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from echomq.errors import ServerError
from echomq.server import (
    EmbeddedValkey,
    built_with_malloc,
    find_jemalloc,
    find_valkey_server,
)

JEMALLOC_HINT = "libjemalloc.so.2 is missing: apt install libjemalloc2 (.ci/run installs it)"


@pytest.fixture
def jemalloc() -> str:
    """The system jemalloc; in CI its absence fails, elsewhere it skips naming the package."""
    library = find_jemalloc()
    if library is None:
        if os.environ.get("CI") == "true":
            pytest.fail(JEMALLOC_HINT)
        pytest.skip(JEMALLOC_HINT)
    return library


def mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_jemalloc_is_preloaded_by_full_path_and_reported(tmp_path: Path, jemalloc: str) -> None:
    with EmbeddedValkey(tmp_path, allocator="jemalloc") as server:
        assert server.pid is not None
        assert jemalloc in mapped(server.pid)
        assert server.malloc == "jemalloc"
        assert "malloc=jemalloc" in repr(server)
        client = redis.Redis.from_url(server.url)
        try:
            client.set("k", "v")
            assert client.get("k") == b"v"
        finally:
            client.close()
    assert server.malloc is None  # stopped: no running server to describe


def test_auto_preloads_jemalloc_when_the_build_lacks_it(tmp_path: Path, jemalloc: str) -> None:
    with EmbeddedValkey(tmp_path) as server:  # auto is the default
        assert server.pid is not None
        assert jemalloc in mapped(server.pid) or built_with_malloc(find_valkey_server()) == (
            "jemalloc"
        )
        assert server.malloc == "jemalloc"


def test_builtin_keeps_the_builds_own_allocator(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path, allocator="builtin") as server:
        assert server.pid is not None
        assert "libjemalloc" not in mapped(server.pid)
        assert server.malloc == built_with_malloc(find_valkey_server())


def test_a_callers_own_preload_is_kept_beside_ours(
    tmp_path: Path, jemalloc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libutil ships with glibc and valkey-server does not link it: mapped only if preloaded.
    libutil = os.path.join(os.path.dirname(jemalloc), "libutil.so.1")
    if not Path(libutil).exists():
        pytest.skip(f"no {libutil} to preload beside jemalloc")
    with EmbeddedValkey(tmp_path / "plain", allocator="builtin") as plain:
        assert plain.pid is not None
        assert "libutil" not in mapped(plain.pid)
    monkeypatch.setenv("LD_PRELOAD", libutil)
    with EmbeddedValkey(tmp_path / "both", allocator="jemalloc") as server:
        assert server.pid is not None
        maps = mapped(server.pid)
        assert jemalloc in maps and os.path.realpath(libutil) in maps


def test_jemalloc_required_but_missing_fails_clearly_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if built_with_malloc(find_valkey_server()) == "jemalloc":
        pytest.skip("this valkey-server is built with jemalloc: nothing to preload")
    monkeypatch.setattr("echomq.server.allocator.find_jemalloc", lambda: None)
    server = EmbeddedValkey(tmp_path, allocator="jemalloc")
    with pytest.raises(ServerError, match="apt install libjemalloc2"):
        server.start()
    assert not server.is_running() and server.pid is None


def test_an_unknown_allocator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allocator"):
        EmbeddedValkey(tmp_path, allocator="tcmalloc")  # type: ignore[arg-type]


def test_under_jemalloc_a_full_server_refuses_growth_but_still_frees(
    tmp_path: Path, jemalloc: str
) -> None:
    # Valkey counts used_memory through malloc_usable_size; preloaded, that is jemalloc's, and
    # maxmemory with noeviction must still refuse a write instead of evicting a job row.
    with EmbeddedValkey(tmp_path, maxmemory=16 * 1024**2, allocator="jemalloc") as server:
        client = redis.Redis.from_url(server.url)
        try:
            n = 0
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                while n < 1_000:
                    client.set(f"fill:{n}", b"x" * 256 * 1024)
                    n += 1
            # 16 MiB holds about 64 values of 256 KiB: the bound is the configured one.
            assert 40 <= n <= 70
            assert client.info("memory")["mem_allocator"]  # the server still answers INFO
            assert client.delete(*(f"fill:{i}" for i in range(n))) == n
            client.set("after", "1")
        finally:
            client.close()
