"""echomq.server against the real valkey-server binary: no mocks, no fakeredis."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import redis.asyncio

from echomq.errors import NotDurable, ServerError
from echomq.server import (
    Appendfsync,
    EmbeddedValkey,
    check_durable,
    check_durable_sync,
    find_valkey_server,
)
from harness.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running(server: EmbeddedValkey) -> Iterator[redis.Redis]:
    """Start ``server`` and hand out a sync client; close the client and stop the server after."""
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def config(client: redis.Redis, name: str) -> str:
    value = client.config_get(name)[name]
    return value.decode() if isinstance(value, bytes) else str(value)


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie waiting for init to reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status or "\nState:\tX" in status


def test_find_valkey_server_returns_an_executable() -> None:
    path = find_valkey_server()
    assert os.path.isfile(path) and os.access(path, os.X_OK)
    out = subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=10, check=False
    )
    assert "v=" in out.stdout


def test_starts_and_answers_ping_with_aof_on_and_noeviction(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path / "data")
    with running(server) as client:
        assert server.is_running() and server.pid is not None
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert client.ping()
        assert config(client, "appendonly") == "yes"
        assert config(client, "maxmemory-policy") == "noeviction"
        assert config(client, "save") == ""
        assert client.info("persistence")["loading"] == 0
        check_durable_sync(client)
    assert not server.is_running() and server.pid is None
    assert (tmp_path / "data" / "appendonly").is_dir()


@pytest.mark.parametrize("dial", ["always", "everysec", "no"])
def test_each_appendfsync_value_is_applied(tmp_path: Path, dial: Appendfsync) -> None:
    with running(EmbeddedValkey(tmp_path, appendfsync=dial)) as client:
        assert config(client, "appendfsync") == dial
        check_durable_sync(client)


def test_unknown_appendfsync_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        EmbeddedValkey(tmp_path, appendfsync="sometimes")  # type: ignore[arg-type]


def test_unix_socket_mode_listens_on_the_socket_only(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path, unix_socket=True)
    with running(server) as client:
        assert server.port is None
        assert server.url == f"unix://{tmp_path / 'valkey.sock'}"
        assert client.ping()
        assert config(client, "port") == "0"
        assert config(client, "unixsocketperm") == "700"
        assert (tmp_path / "valkey.sock").is_socket()


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path) as server:
        assert server.is_running()
    assert not server.is_running()


def test_data_survives_stop_and_restart_on_the_same_port(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    with running(server) as client:
        port, url, first_pid = server.port, server.url, server.pid
        client.hset("emq:{t}:job:1", mapping={"state": "pending", "attempts": 0})
        client.close()
        server.restart()
        assert (server.port, server.url) == (port, url)
        assert server.pid != first_pid
        assert client.hgetall("emq:{t}:job:1") == {b"state": b"pending", b"attempts": b"0"}


def test_acknowledged_writes_survive_sigkill_with_appendfsync_always(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path, appendfsync="always")
    with running(server) as client:
        for i in range(200):
            client.rpush("acked", i)
        pid = server.pid
        assert pid is not None
        server.kill()
        assert not server.is_running() and process_gone(pid)
        client.close()
        server.start()  # same data dir, same port
        assert client.lrange("acked", 0, -1) == [str(i).encode() for i in range(200)]


def test_unix_socket_server_restarts_on_the_same_socket(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path, unix_socket=True)
    with running(server) as client:
        client.set("k", "v")
        server.kill()  # leaves a stale socket file behind, as a crash would
        client.close()
        server.restart()
        assert client.get("k") == b"v"


def test_stop_and_kill_are_idempotent(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    server.stop()  # never started
    server.kill()
    server.start()
    server.stop()
    server.stop()
    server.kill()
    assert not server.is_running()


def test_a_port_taken_before_start_is_replaced_by_a_free_one(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path)
    picked = server.port
    assert picked is not None
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", picked))
        squatter.listen()
        with running(server) as client:
            assert server.port != picked
            assert client.ping()


def test_a_fixed_port_in_use_fails_with_the_log_tail(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        server = EmbeddedValkey(tmp_path, port=port)
        with pytest.raises(ServerError, match="Address already in use"):
            server.start()
    assert not server.is_running()


def test_a_bad_config_fails_with_the_log_tail(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path, extra_config={"no-such-directive": "1"})
    with pytest.raises(ServerError, match="no-such-directive"):
        server.start()
    assert not server.is_running()


async def test_check_durable_passes_on_ours(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path) as server:
        conn = redis.asyncio.Redis.from_url(server.url)
        try:
            await check_durable(conn)
        finally:
            await conn.aclose()


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"appendonly": "no"}, "appendonly yes"),
        ({"maxmemory-policy": "allkeys-lru"}, "noeviction"),
    ],
)
async def test_check_durable_refuses_a_server_that_can_lose_jobs(
    tmp_path: Path, extra: dict[str, str], complaint: str
) -> None:
    with EmbeddedValkey(tmp_path, extra_config=extra) as server:
        conn = redis.asyncio.Redis.from_url(server.url, decode_responses=True)
        try:
            with pytest.raises(NotDurable, match=complaint):
                await check_durable(conn)
        finally:
            await conn.aclose()
        client = redis.Redis.from_url(server.url)
        try:
            with pytest.raises(NotDurable, match=complaint):
                check_durable_sync(client)
        finally:
            client.close()


async def test_check_durable_falls_back_to_info_when_config_is_renamed(tmp_path: Path) -> None:
    hidden = {"rename-command": 'CONFIG ""'}
    with EmbeddedValkey(tmp_path / "ok", extra_config=hidden) as server:
        conn = redis.asyncio.Redis.from_url(server.url)
        try:
            with pytest.raises(redis.ResponseError):
                await conn.config_get("appendonly")
            await check_durable(conn)
        finally:
            await conn.aclose()
    lossy = {**hidden, "appendonly": "no", "maxmemory-policy": "allkeys-lru"}
    with EmbeddedValkey(tmp_path / "lossy", extra_config=lossy) as server:
        conn = redis.asyncio.Redis.from_url(server.url)
        try:
            with pytest.raises(NotDurable, match="appendonly yes.*noeviction"):
                await check_durable(conn)
        finally:
            await conn.aclose()


def test_no_orphan_when_the_parent_is_sigkilled(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys, time
        from echomq.server import EmbeddedValkey
        server = EmbeddedValkey(sys.argv[1])
        server.start()
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT
    )
    server_pid: int | None = None
    try:
        assert parent.stdout is not None
        ready, _, _ = select.select([parent.stdout], [], [], 20)
        assert ready, "the parent never reported its server pid"
        server_pid = int(parent.stdout.readline())
        assert not process_gone(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while not process_gone(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(server_pid), f"valkey-server {server_pid} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if server_pid is not None and not process_gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)  # do not leak it even when the test fails


async def test_the_shared_fixture_serves_a_durable_server(
    redis_conn: redis.asyncio.Redis, queue_name: str, valkey_server: EmbeddedValkey
) -> None:
    assert valkey_server.is_running()
    await check_durable(redis_conn)
    reply = await redis_conn.config_get("appendfsync")
    assert reply["appendfsync"] in ("always", b"always")
    await redis_conn.set(f"emq:{{{queue_name}}}:probe", b"1")
    assert await redis_conn.get(f"emq:{{{queue_name}}}:probe") == b"1"
