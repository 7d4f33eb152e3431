"""Settings declared once (codemojex.settings): the variables ``up`` hands its children
read back to the same configuration, whatever each setting's value; every variable is
read and checked in one place, so a value no command could use is refused by every
command, in one line that names the variable."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from codemojex.config import Config, ConfigError, ProcessOptions
from codemojex.settings import declared


def _changed(name: str, value: Any) -> Any:
    """A value for the setting ``name`` other than its default ``value``, within bounds."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return {"partitions": 3, "metrics_port": 9100}.get(name, value + 3)
    if isinstance(value, Path):
        return value / "elsewhere"
    if isinstance(value, tuple):
        return ("x", "y")
    return {
        "appendfsync": "everysec",
        "durability": "replicated",
        "forwarded_allow_ips": "10.0.0.0/8,192.0.2.1",
    }.get(name, f"{name}-changed")


def test_every_setting_up_hands_down_reads_back_to_the_same_value() -> None:
    base = Config()
    changes = {
        f.name: _changed(f.name, getattr(base, f.name)) for f in fields(Config) if f.name != "extra"
    }
    config = Config(**changes)
    env = config.to_env({"PATH": "/bin", "CODEMOJEX_PORT": "1"})
    kept = {"host", "port", "workers"}  # up's business: flags, or up's own
    assert {f"CODEMOJEX_{name.upper()}" for name in changes} - set(env) == {
        f"CODEMOJEX_{name.upper()}" for name in kept - {"port"}
    }
    assert env["CODEMOJEX_PORT"] == "1" and env["PATH"] == "/bin"  # the parent's, untouched
    again = Config.from_env(env)
    for name in changes.keys() - kept:
        assert getattr(again, name) == getattr(config, name), name


def test_a_setting_that_is_none_is_taken_out_of_the_childrens_environment() -> None:
    env = Config(admin_token=None).to_env({"CODEMOJEX_ADMIN_TOKEN": "the parent's"})
    assert "CODEMOJEX_ADMIN_TOKEN" not in env


@pytest.mark.parametrize(
    ("env", "words"),
    [
        # Read by up only, before: now every command refuses what up could not use.
        ({"CODEMOJEX_APPENDFSYNC": "sometimes"}, ["CODEMOJEX_APPENDFSYNC", "'sometimes'"]),
        ({"CODEMOJEX_WORKERS": "-1"}, ["--workers", "0 or more"]),
        ({"CODEMOJEX_WEB_PROCESSES": "0"}, ["--web-processes", "1 or more"]),
        ({"CODEMOJEX_GUESS_RATE": "nan"}, ["--guess-rate"]),
        ({"CODEMOJEX_DOOR_WAIT_MS": "-5"}, ["--door-in-flight", "--door-wait-ms"]),
        ({"CODEMOJEX_PARTITIONS": "65"}, ["--partitions", "1 to 64"]),
    ],
)
def test_a_value_out_of_bounds_is_refused_naming_it(env: dict[str, str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.from_env(env)
    for word in words:
        assert word in str(refused.value), (word, str(refused.value))


def test_a_flag_is_normalised_and_refused_by_its_own_name() -> None:
    config = Config.from_env({}, forwarded_allow_ips=" 10.0.0.1 192.0.2.0/24")
    assert config.forwarded_allow_ips == "10.0.0.1,192.0.2.0/24"
    with pytest.raises(ConfigError, match="^--forwarded-allow-ips .* not 'proxy'$"):
        Config.from_env({"CODEMOJEX_FORWARDED_ALLOW_IPS": "10.0.0.1"}, forwarded_allow_ips="proxy")


def test_the_burst_is_free_while_the_rate_is_off() -> None:
    assert (
        Config.from_env({"CODEMOJEX_GUESS_RATE": "0", "CODEMOJEX_GUESS_BURST": "0"}).guess_burst
        == 0
    )
    with pytest.raises(ConfigError, match="--guess-burst"):
        Config.from_env({"CODEMOJEX_GUESS_BURST": "0"})


def test_a_process_option_is_read_and_checked_like_a_setting() -> None:
    assert ProcessOptions.from_env({}) == ProcessOptions()
    got = ProcessOptions.from_env({"CODEMOJEX_LOG_LEVEL": "debug", "CODEMOJEX_ACCESS_LOG": "on"})
    assert (got.log_level, got.access_log, got.log_format) == ("debug", True, "text")
    assert ProcessOptions.from_env(
        {"CODEMOJEX_WORKER_ID": "WRK_1"}, worker_id="WRK_2"
    ).worker_id == ("WRK_2")
    with pytest.raises(
        ConfigError, match="CODEMOJEX_LOG_FORMAT must be one of text, json, not 'xml'"
    ):
        ProcessOptions.from_env({"CODEMOJEX_LOG_FORMAT": "xml"})


def test_every_field_is_declared_and_a_flag_belongs_to_a_real_command() -> None:
    for cls in (Config, ProcessOptions):
        for d in declared(cls):
            assert set(d.setting.flag_of) <= {"up", "web", "worker", "migrate"}, d.name
            assert not d.setting.flag_of or d.setting.help, f"{d.name} has a flag and no help"
