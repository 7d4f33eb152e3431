"""The command line's manners: ``--version``; every flag's help names the ``CODEMOJEX_*``
variable that also sets it; a bad variable or flag value costs one line on stderr and exit
status 2, never a traceback; ``mash`` takes the admin token from the environment, where
``ps`` does not show it. Each runs the real ``codemojex`` command as a subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields
from importlib.metadata import version
from pathlib import Path

import pytest

from codemojex.cli import build_parser
from codemojex.config import Config
from harness.running import ROOT, Up

# Variables the command reads that are not Config fields.
OTHER_VARIABLES = {"log_level", "log_format", "worker_id", "access_log", "admin_token"}
# `mash` is a load client: its flags are per run, and only the secret and the log level
# have variables.
MASH_FLAGS_WITHOUT_VARIABLE = {
    "url",
    "players",
    "mashers",
    "duration",
    "masher_rate",
    "masher_in_flight",
    "masher_addresses",
    "chaos_kill_every",
    "report",
    "seed",
    "drain_timeout",
    "no_progress",
}


def codemojex(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
    return subprocess.run(
        [sys.executable, "-m", "codemojex", *argv],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_version_prints_the_installed_version() -> None:
    done = codemojex("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"codemojex {version('codemojex')}"


def _subcommands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_every_flag_of_every_command_has_help_naming_its_variable() -> None:
    config_fields = {f.name for f in fields(Config)}
    commands = dict(_subcommands())
    assert set(commands) == {"up", "web", "worker", "migrate", "mash"}
    seen = 0
    for name, parser in commands.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flag = f"codemojex {name} {action.option_strings[0]}"
            assert action.help and action.help != argparse.SUPPRESS, f"{flag} has no help"
            named = re.findall(r"CODEMOJEX_[A-Z_]+", action.help)
            variable = f"CODEMOJEX_{action.dest.upper()}"
            if name == "mash" and action.dest in MASH_FLAGS_WITHOUT_VARIABLE:
                assert named == [], f"{flag} names {named}, which mash does not read"
            else:
                assert action.dest in config_fields | OTHER_VARIABLES, f"{flag}: no variable"
                assert named == [variable], f"{flag}: {action.help!r} should name {variable}"
            seen += 1
    assert seen > 40  # the walk did reach the flags


def test_the_help_of_a_command_shows_the_variables() -> None:
    done = codemojex("up", "--help")
    assert done.returncode == 0, done.stderr
    for variable in ("CODEMOJEX_ROUND_SECONDS", "CODEMOJEX_LOG_LEVEL", "CODEMOJEX_PORT"):
        assert variable in done.stdout


@pytest.mark.parametrize(
    ("variable", "value", "argv"),
    [
        ("CODEMOJEX_ROUND_SECONDS", "abc", ["migrate"]),
        ("CODEMOJEX_FIFO", "ture", ["worker", "--valkey-url", "redis://127.0.0.1:9"]),
        ("CODEMOJEX_GUESS_RATE", "fast", ["web", "--valkey-url", "redis://127.0.0.1:9"]),
        ("CODEMOJEX_PORT", "80a", ["up"]),
        ("CODEMOJEX_LOG_LEVEL", "loud", ["migrate"]),
        ("CODEMOJEX_LOG_FORMAT", "xml", ["migrate"]),
        ("CODEMOJEX_ACCESS_LOG", "maybe", ["web", "--valkey-url", "redis://127.0.0.1:9"]),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2(
    tmp_path: Path, variable: str, value: str, argv: list[str]
) -> None:
    done = codemojex(*argv, "--data-dir", str(tmp_path), env={variable: value})
    assert_one_line(done, variable, repr(value))
    assert not (tmp_path / "codemojex.db").exists()  # refused before doing anything


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["up", "--round-seconds", "abc"], ["--round-seconds", "'abc'"]),
        (["worker", "--concurrency", "many"], ["--concurrency", "'many'"]),
        (["up", "--appendfsync", "sometimes"], ["--appendfsync", "'sometimes'"]),
        (["mash", "--url", "http://x", "--players", "lots"], ["--players", "'lots'"]),
        (["up", "--no-such-flag"], ["--no-such-flag"]),
        (["juggle"], ["'juggle'"]),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(argv: list[str], words: list[str]) -> None:
    assert_one_line(codemojex(*argv), *words, "--help")


def test_mash_without_any_admin_token_says_where_to_put_it() -> None:
    done = codemojex("mash", "--url", "http://127.0.0.1:9", "--chaos-kill-every", "1")
    assert_one_line(done, "CODEMOJEX_ADMIN_TOKEN")


@pytest.mark.slow
def test_mash_takes_the_admin_token_from_the_environment(
    start_up: Callable[..., Up], tmp_path: Path
) -> None:
    up = start_up("--workers", "1")
    report = tmp_path / "report"
    argv = [
        "mash",
        "--url",
        up.base,
        "--players",
        "2",
        "--mashers",
        "0",
        "--duration",
        "2",
        "--no-progress",
        "--report",
        str(report),
    ]
    done = codemojex(*argv, env={"CODEMOJEX_ADMIN_TOKEN": up.admin_token})
    assert done.returncode == 0, (done.stdout, done.stderr)
    # The queue samples come from the admin API: they exist only if the token was read.
    samples = json.loads((report / "results.json").read_text())["queue"]
    assert samples, "no queue samples: mash did not use the admin token"
    assert up.admin_token not in (report / "results.json").read_text()
