"""The embedded Valkey's memory bound: a share of the machine, noeviction."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from echomq.server import MAXMEMORY_CAP, EmbeddedValkey, default_maxmemory, machine_memory


def test_by_default_maxmemory_is_a_capped_share_of_the_machine(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path / "v") as server:
        client = redis.Redis.from_url(server.url)
        try:
            got = int(client.config_get("maxmemory")["maxmemory"])
            assert got == default_maxmemory() == server.maxmemory
            assert 0 < got <= min(MAXMEMORY_CAP, machine_memory())
            assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        finally:
            client.close()
    assert default_maxmemory(0.5, cap=10**15) == max(64 * 1024**2, machine_memory() // 2)


def test_a_full_server_refuses_growth_but_still_frees(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path / "v", maxmemory=16 * 1024**2) as server:
        client = redis.Redis.from_url(server.url)
        try:
            assert int(client.config_get("maxmemory")["maxmemory"]) == 16 * 1024**2
            n = 0
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                while True:
                    client.set(f"fill:{n}", b"x" * 256 * 1024)
                    n += 1
            assert n > 0
            assert client.delete(*(f"fill:{i}" for i in range(n))) == n  # frees
            client.set("after", "1")  # room again
        finally:
            client.close()


@pytest.mark.parametrize(
    "bad",
    [{"maxmemory": -1}, {"maxmemory": 1.5}, {"maxmemory_share": 0.0}, {"maxmemory_share": 2.0}],
)
def test_a_bad_memory_setting_is_refused(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        EmbeddedValkey(tmp_path / "v", **bad)  # type: ignore[arg-type]
