"""compose.yaml and the Dockerfile, checked statically (no Docker engine needed).

Every app service runs a real ``codemojex`` subcommand (parsed by the CLI's own parser), sets
only variables Config reads, and depends on services that exist. The file is kept to plain
block YAML, read by a small parser of that subset, and PyYAML (a dev dependency) must read
it the same way.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from codemojex.cli import build_parser
from codemojex.config import Config

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
CONFIG_VARS = {f"CODEMOJEX_{f.name.upper()}" for f in fields(Config) if f.name != "extra"}
KNOWN_VARS = CONFIG_VARS | {"CODEMOJEX_WORKER_ID"}  # codemojex.worker reads it too


# -- a parser for the block-YAML subset compose.yaml keeps to ----------------------------------


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith(("[", "{", '"')):
        return json.loads(text)
    if text.startswith("'"):
        assert text.endswith("'"), text
        return text[1:-1].replace("''", "'")
    text = re.split(r"\s+#", text, maxsplit=1)[0].strip()  # an inline comment
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return {"true": True, "false": False, "null": None, "~": None, "": None}.get(text, text)


def _lines(text: str) -> list[tuple[int, str]]:
    out = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            out.append((len(raw) - len(raw.lstrip(" ")), stripped))
    return out


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- "):
        items: list[Any] = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            item = lines[i][1][2:]
            assert not re.match(r"^[\w.-]+:(\s|$)", item), f"mapping in a sequence: {item}"
            items.append(_scalar(item))
            i += 1
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        key, sep, rest = lines[i][1].partition(":")
        assert sep and (not rest or rest[0] == " "), f"not a `key: value` line: {lines[i][1]}"
        i += 1
        if rest.strip():
            mapping[key] = _scalar(rest)
        elif i < len(lines) and lines[i][0] > indent:
            mapping[key], i = _block(lines, i, lines[i][0])
        else:
            mapping[key] = None
    return mapping, i


def load_subset(text: str) -> Any:
    lines = _lines(text)
    value, end = _block(lines, 0, 0)
    assert end == len(lines), f"unexpected indentation at: {lines[end][1]}"
    return value


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped, unused-ignore]

    doc = load_subset(COMPOSE.read_text(encoding="utf-8"))
    assert yaml.safe_load(COMPOSE.read_text(encoding="utf-8")) == doc
    return dict(doc)


@pytest.fixture(scope="module")
def app_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items() if "build" in svc}


def _run_args(argv: list[str]) -> Any:
    assert argv[0] == "codemojex", argv
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"not a valid codemojex command line: {argv}")


# -- tests -------------------------------------------------------------------------------------


def test_the_subset_parser_reads_what_compose_needs() -> None:
    text = (
        'a:\n  b: ["x", ""]\n  c: 3\n  d:\n    - \'p:q\'\n    - "8001:8000"\n'
        '  e: {}\n  f: plain text # note\n# comment\ng: "${X:-1}"\n'
    )
    assert load_subset(text) == {
        "a": {"b": ["x", ""], "c": 3, "d": ["p:q", "8001:8000"], "e": {}, "f": "plain text"},
        "g": "${X:-1}",
    }


def test_every_app_service_runs_a_real_codemojex_subcommand(
    app_services: dict[str, dict[str, Any]],
) -> None:
    commands = {name: _run_args(svc["command"]).command for name, svc in app_services.items()}
    assert sorted(commands.values()).count("web") >= 2
    assert "migrate" in commands.values()
    assert "worker" in commands.values()
    for name, svc in app_services.items():
        assert svc["build"] == "."
        assert svc["image"] == app_services["migrate"]["image"], name


def test_web_servers_listen_on_every_interface_inside_their_container(
    app_services: dict[str, dict[str, Any]],
) -> None:
    for name, svc in app_services.items():
        args = _run_args(svc["command"])
        if args.command == "web":
            assert args.host == "0.0.0.0", name
            container_ports = {p.split(":")[-1] for p in svc["ports"]}
            assert container_ports == {str(args.port)}, name


def test_workers_run_three_replicas_with_time_to_release_their_jobs(
    app_services: dict[str, dict[str, Any]],
) -> None:
    workers = [s for s in app_services.values() if _run_args(s["command"]).command == "worker"]
    assert sum(s.get("deploy", {}).get("replicas", 1) for s in workers) == 3
    for svc in workers:
        # A stopping worker waits up to one lease (10 s) for its in-flight jobs.
        assert int(svc["stop_grace_period"].rstrip("s")) > Config().lease_ms // 1000


def test_environment_names_are_ones_config_reads(app_services: dict[str, dict[str, Any]]) -> None:
    for name, svc in app_services.items():
        env = svc.get("environment") or {}
        assert isinstance(env, dict), f"{name}: use the mapping form of environment"
        for var, value in env.items():
            assert var in KNOWN_VARS, f"{name}: {var} is read by nothing"
            for ref in re.findall(r"\$\{(\w+)", str(value)):
                assert ref in KNOWN_VARS or not ref.startswith("CODEMOJEX_"), ref
        role = _run_args(svc["command"]).command
        needed = {
            "migrate": {"CODEMOJEX_DATABASE_URL"},
            "worker": {"CODEMOJEX_DATABASE_URL", "CODEMOJEX_VALKEY_URL"},
            "web": {"CODEMOJEX_DATABASE_URL", "CODEMOJEX_VALKEY_URL", "CODEMOJEX_ADMIN_TOKEN"},
        }[role]
        assert needed <= set(env), f"{name} lacks {needed - set(env)}"


def test_urls_point_at_the_services_that_exist(
    compose: dict[str, Any], app_services: dict[str, dict[str, Any]]
) -> None:
    services = compose["services"]
    for svc in app_services.values():
        env = svc["environment"]
        if "CODEMOJEX_VALKEY_URL" in env:
            assert re.fullmatch(r"redis://valkey:6379/\d+", env["CODEMOJEX_VALKEY_URL"])
        host = re.search(r"@([\w-]+):5432/", env["CODEMOJEX_DATABASE_URL"])
        assert host is not None and host[1] in services


def test_depends_on_names_and_volumes_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep in deps:
            assert dep in services, f"{name} depends on unknown {dep}"
            if isinstance(deps, dict):
                assert deps[dep]["condition"] in (
                    "service_started",
                    "service_healthy",
                    "service_completed_successfully",
                )
                if deps[dep]["condition"] == "service_healthy":
                    assert "healthcheck" in services[dep], dep
        for volume in svc.get("volumes") or []:
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"


def test_valkey_is_durable_and_postgres_is_checked(compose: dict[str, Any]) -> None:
    valkey = compose["services"]["valkey"]
    assert valkey["image"] == "valkey/valkey:8.1"
    argv = valkey["command"]
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "always"
    assert options["--maxmemory-policy"] == "noeviction"
    assert valkey["volumes"] and valkey["healthcheck"]
    postgres = compose["services"]["postgres"]
    assert postgres["image"] == "postgres:15"
    assert postgres["volumes"] and "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_dockerfile_installs_the_package_with_everything_the_wheel_packs() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.MULTILINE)
    assert re.search(r"^RUN pip install \.", text, re.MULTILINE)
    copied = {
        src for line in re.findall(r"^COPY (.+)$", text, re.MULTILINE) for src in line.split()[:-1]
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {
        *wheel["packages"],
        *wheel.get("force-include", {}),
        "pyproject.toml",
        project["project"]["readme"],
    }
    assert needed <= copied, f"the image lacks {needed - copied}"
    cmd = re.search(r"^CMD (\[.*\])\s*$", text, re.MULTILINE)
    assert cmd is not None
    argv = json.loads(cmd[1])
    assert argv[0] == "codemojex"


def test_every_app_service_has_a_health_check_that_reads_what_it_provides(
    app_services: dict[str, dict[str, Any]],
) -> None:
    for name, svc in app_services.items():
        if svc["command"][:2] == ["codemojex", "web"]:
            assert "/readyz" in " ".join(svc["healthcheck"]["test"]), name
        if svc["command"][:2] == ["codemojex", "worker"]:
            path = svc["environment"]["CODEMOJEX_HEALTH_FILE"]
            assert path in " ".join(svc["healthcheck"]["test"]), name
