"""The command line's settings as they were before the configuration was declared once
(docs/contract.md §5: every flag, variable and default stays): each role's flags with their
defaults, types and choices, ``Config``'s defaults, what a few environments and command
lines resolve to (or the one line that refuses them), and what ``up`` hands its children.

``cli_recorded.json`` was written from the code before the change by running this module
as a script (``uv run python -m tests.cli.test_settings_recorded``); the test compares the
code of today with it. Help texts are left out: they are derived now, and
``test_every_help_shows_its_default`` checks them instead."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from codemojex import cli, launch
from codemojex.config import Config, ConfigError, ProcessOptions
from codemojex.settings import declared

RECORD = Path(__file__).with_name("cli_recorded.json")
ROLES = ("up", "web", "worker", "migrate")

# (argv, environment): each resolved as the role would, before it starts anything.
COMMAND_LINES: list[tuple[list[str], dict[str, str]]] = [
    (["up"], {}),
    (["web", "--valkey-url", "redis://v:6379/0"], {}),
    (["worker", "--concurrency", "4", "--prefetch", "2", "--fifo"], {"CODEMOJEX_FIFO": "0"}),
    (["up", "--port", "9000", "--workers", "0"], {"CODEMOJEX_PORT": "7000"}),
    (
        ["web", "--round-seconds", "30"],
        {"CODEMOJEX_ROUND_SECONDS": "45", "CODEMOJEX_LANE_CAP": "9"},
    ),
    (
        ["web"],
        {"CODEMOJEX_PALETTE": "🍎 🍌  🍒", "CODEMOJEX_ALLOWED_ORIGINS": "http://a, http://b"},
    ),
    (["web"], {"CODEMOJEX_FORWARDED_ALLOW_IPS": " 10.0.0.1 192.0.2.0/24"}),
    (["web", "--forwarded-allow-ips", "*"], {"CODEMOJEX_FORWARDED_ALLOW_IPS": "10.0.0.1"}),
    (["web", "--forwarded-allow-ips", "10.0.0.1,proxy"], {}),
    (["web"], {"CODEMOJEX_FORWARDED_ALLOW_IPS": "proxy"}),
    (["web", "--durability", "replicated"], {"CODEMOJEX_REPLICA_TIMEOUT_MS": "250"}),
    (["web"], {"CODEMOJEX_DURABILITY": "sometimes"}),
    (["web"], {"CODEMOJEX_REPLICA_TIMEOUT_MS": "0"}),
    (["worker", "--concurrency", "0"], {}),
    (["worker", "--prefetch", "-1"], {}),
    (["worker"], {"CODEMOJEX_CONCURRENCY": "0"}),
    (["web", "--guess-rate", "-1"], {}),
    (["web", "--guess-rate", "inf"], {}),
    (["web", "--guess-rate", "5", "--guess-burst", "0"], {}),
    (["web", "--guess-rate", "0", "--guess-burst", "0"], {}),
    (["web", "--partitions", "0"], {}),
    (["web", "--partitions", "65"], {}),
    (["worker", "--partitions", "64", "--metrics-port", "9100"], {}),
    (["worker", "--metrics-port", "65536"], {}),
    (["web", "--door-wait-ms", "-1"], {}),
    (["web", "--door-in-flight", "0", "--address-in-flight", "0"], {}),
    (["migrate"], {"CODEMOJEX_ROUND_SECONDS": "abc"}),
    (["migrate"], {"CODEMOJEX_GUESS_RATE": "fast"}),
    (["migrate"], {"CODEMOJEX_FIFO": "ture"}),
    (["migrate"], {"CODEMOJEX_FIFO": "Yes", "CODEMOJEX_DATA_DIR": "/tmp/x"}),
    (["migrate"], {"CODEMOJEX_ADMIN_TOKEN": "t", "CODEMOJEX_METRICS_TOKEN": "m"}),
    (["migrate"], {"CODEMOJEX_DATABASE_URL": "sqlite:///a.db", "CODEMOJEX_HEALTH_FILE": "/h"}),
    (["migrate"], {"CODEMOJEX_SOCKETS_PER_PLAYER": "2", "CODEMOJEX_PLAYER_RATE": "0.5"}),
]

# Configurations ``up`` hands to its children (``child_env``), the parent's own
# environment being these variables.
PARENT_ENV = {"PATH": "/bin", "CODEMOJEX_ADMIN_TOKEN": "parent", "CODEMOJEX_HOST": "0.0.0.0"}
CHILD_CONFIGS: list[dict[str, Any]] = [
    {},
    {"valkey_url": "redis://127.0.0.1:1/0", "database_url": "sqlite:///x.db", "fifo": True},
    {
        "data_dir": "/srv/data",
        "admin_token": "tok",
        "metrics_token": "m",
        "allowed_origins": ["http://a", "http://b"],
        "palette": ["a", "b", "c"],
        "guess_rate": 2.5,
        "forwarded_allow_ips": "10.9.0.0/16",
        "host": "0.0.0.0",
        "port": 1,
        "workers": 7,
        "web_processes": 3,
        "health_file": "/tmp/h",
    },
]


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return f"Path({str(value)!r})"
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not value < float("inf"):
        return repr(value)
    return value


def _roles() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in cli.build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in ROLES:
                yield name, action.choices[name]


def flags() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, parser in _roles():
        out[role] = {
            action.option_strings[0]: {
                "options": action.option_strings,
                "dest": action.dest,
                "default": _jsonable(action.default),
                "type": getattr(action.type, "__name__", None),
                "choices": _jsonable(action.choices),
                "const": action.const,
                "nargs": action.nargs,
                "metavar": action.metavar,
                "action": type(action).__name__,
                "variables": re.findall(r"CODEMOJEX_[A-Z_]+", action.help or ""),
            }
            for action in parser._actions
            if not isinstance(action, argparse._HelpAction)
        }
    return out


def defaults() -> dict[str, Any]:
    return {f.name: _jsonable(getattr(Config(), f.name)) for f in fields(Config)}


def resolved(argv: list[str], env: dict[str, str]) -> Any:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({k: v for k, v in saved.items() if not k.startswith("CODEMOJEX_")})
    os.environ.update(env)
    try:
        config = launch.config_of(cli.build_parser().parse_args(argv))
    except (launch.Fatal, ConfigError) as e:
        return f"refused: {e}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {f.name: _jsonable(getattr(config, f.name)) for f in fields(Config)}


def children(changes: dict[str, Any]) -> dict[str, str]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(PARENT_ENV)
    try:
        typed: dict[str, Any] = {
            k: Path(v) if k == "data_dir" else tuple(v) if isinstance(v, list) else v
            for k, v in changes.items()
        }
        return launch.child_env(Config(**typed))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def snapshot() -> dict[str, Any]:
    return {
        "flags": flags(),
        "defaults": defaults(),
        "resolved": [
            {"argv": argv, "env": env, "config": resolved(argv, env)} for argv, env in COMMAND_LINES
        ],
        "child_env": [{"config": c, "env": children(c)} for c in CHILD_CONFIGS],
    }


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(RECORD.read_text(encoding="utf-8"))
    return recorded


@pytest.fixture(scope="module")
def today() -> dict[str, Any]:
    fresh: dict[str, Any] = json.loads(json.dumps(snapshot()))
    return fresh


@pytest.mark.parametrize("role", ROLES)
def test_each_role_has_the_flags_and_defaults_it_had(
    record: dict[str, Any], today: dict[str, Any], role: str
) -> None:
    assert today["flags"][role] == record["flags"][role]


def test_config_has_the_defaults_it_had(record: dict[str, Any], today: dict[str, Any]) -> None:
    assert today["defaults"] == record["defaults"]


@pytest.mark.parametrize("case", range(len(COMMAND_LINES)))
def test_a_command_line_resolves_as_it_did(
    record: dict[str, Any], today: dict[str, Any], case: int
) -> None:
    assert today["resolved"][case] == record["resolved"][case]


@pytest.mark.parametrize("case", range(len(CHILD_CONFIGS)))
def test_up_hands_its_children_what_it_did(
    record: dict[str, Any], today: dict[str, Any], case: int
) -> None:
    assert today["child_env"][case] == record["child_env"][case]


def test_every_help_shows_its_default() -> None:
    """Help is derived from the declaration: each flag's help ends with the default (as
    the running code has it) or what its absence means, then the flag's variable."""
    of = {d.name: d for cls in (ProcessOptions, Config) for d in declared(cls)}
    instances = {"ProcessOptions": ProcessOptions(), "Config": Config()}
    seen = 0
    for role, parser in _roles():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            d = of[action.dest]
            help_ = str(action.help)
            variable = f"CODEMOJEX_{action.dest.upper()}"
            owner = (
                "Config" if action.dest in {f.name for f in fields(Config)} else "ProcessOptions"
            )
            default = getattr(instances[owner], action.dest)
            if isinstance(default, bool):
                assert help_.endswith(f"({variable}=1)"), (role, help_)
            else:
                assert help_.endswith(f"; {variable})"), (role, help_)
                if d.setting.shown is not None:
                    assert f"({d.setting.shown};" in help_, (role, help_)
                else:
                    shown = f"{default:g}" if isinstance(default, float) else str(default)
                    assert shown.lstrip("./") in help_, (role, action.dest, help_)
            seen += 1
    assert seen > 50


if __name__ == "__main__":
    RECORD.write_text(
        json.dumps(snapshot(), indent=1, ensure_ascii=False, sort_keys=True) + "\n",
        encoding="utf-8",
    )
