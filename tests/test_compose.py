"""compose.yaml, compose.cluster.yaml, the Dockerfile and deploy/, checked statically:
against the compose specification's JSON schema (check-jsonschema's vendored copy, always),
and ``docker compose config`` on both files where a Docker CLI with compose exists.

The files are read with PyYAML (anchors and merge keys resolved, as compose resolves
them). Every app service runs a real ``codemojex`` subcommand (parsed by the CLI's own
parser) and sets only variables the code reads; every dependency, health check, volume,
proxy route and scrape target points at something that exists. What is exposed is checked
too: only the proxy is published beyond loopback and it does not route ``/metrics``; every
secret is a required variable (``${VAR:?…}``: compose refuses to start without it, and
there is no default to forget); Grafana has no anonymous access; Prometheus scrapes with the
metrics token.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]

from codemojex.cli import build_parser
from codemojex.config import Config, parse_forwarded_allow_ips

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose.yaml"
CLUSTER = ROOT / "compose.cluster.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY = ROOT / "deploy"
CONFIG_VARS = {f"CODEMOJEX_{f.name.upper()}" for f in fields(Config) if f.name != "extra"}
# codemojex.worker reads CODEMOJEX_WORKER_ID; codemojex.cli reads CODEMOJEX_LOG_FORMAT.
KNOWN_VARS = CONFIG_VARS | {"CODEMOJEX_WORKER_ID", "CODEMOJEX_LOG_FORMAT"}
ONE_SHOT = {"migrate", "valkey-cluster-init"}
# Variables compose must refuse to start without (no default anywhere).
REQUIRED_SECRETS = (
    "CODEMOJEX_ADMIN_TOKEN",
    "CODEMOJEX_METRICS_TOKEN",
    "GRAFANA_ADMIN_PASSWORD",
    "VALKEY_PASSWORD",
)
VALKEY_PASSWORD = r"\$\{VALKEY_PASSWORD:\?[^}]+\}"
CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``docker compose -f base -f override``, as far as these files need: mappings merge
    key by key (environment, depends_on, services), anything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)


@pytest.fixture(scope="module")
def cluster(compose: dict[str, Any]) -> dict[str, Any]:
    return merged(compose, load(CLUSTER))


@pytest.fixture(scope="module", params=["single", "cluster"])
def either(request: pytest.FixtureRequest, compose: dict[str, Any]) -> dict[str, Any]:
    """Each check that holds for both deployments runs on both."""
    return compose if request.param == "single" else merged(compose, load(CLUSTER))


def app_services(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in doc["services"].items() if "build" in svc}


def _run_args(argv: list[str]) -> Any:
    assert argv[0] == "codemojex", argv
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"not a valid codemojex command line: {argv}")


def _role(doc: dict[str, Any], role: str) -> tuple[str, dict[str, Any]]:
    found = [
        (n, s) for n, s in app_services(doc).items() if _run_args(s["command"]).command == role
    ]
    assert len(found) == 1, f"one {role} service (scaled by replicas), not {found}"
    return found[0]


def _container_port(svc: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[-1].split("/")[0]) for p in svc.get("expose", [])}


# -- the app services --------------------------------------------------------------------------


def test_every_app_service_runs_a_real_codemojex_subcommand_from_one_image(
    compose: dict[str, Any],
) -> None:
    apps = app_services(compose)
    commands = {name: _run_args(svc["command"]).command for name, svc in apps.items()}
    assert sorted(commands.values()) == ["migrate", "web", "worker"]
    for name, svc in apps.items():
        assert svc["build"] == ".", name
        assert svc["image"] == apps["migrate"]["image"], name


def test_every_service_has_an_image_and_a_restart_policy(either: dict[str, Any]) -> None:
    for name, svc in either["services"].items():
        assert svc.get("image"), f"{name} has no image"
        if name in ONE_SHOT:
            assert svc["restart"] == "no", name
        else:
            assert svc["restart"] in ("unless-stopped", "always"), name


def test_web_runs_two_replicas_behind_the_proxy_on_every_interface(
    compose: dict[str, Any],
) -> None:
    name, web = _role(compose, "web")
    args = _run_args(web["command"])
    assert args.host == "0.0.0.0"
    assert _container_port(web) == {args.port}
    assert web["deploy"]["replicas"] == 2
    assert "ports" not in web, "replicas share no host port: the proxy is the way in"
    assert compose["services"]["proxy"]["ports"]
    assert compose["services"]["proxy"]["depends_on"][name]["condition"] == "service_healthy"


def test_workers_run_three_replicas_with_time_to_release_their_jobs(
    compose: dict[str, Any],
) -> None:
    _, worker = _role(compose, "worker")
    assert worker["deploy"]["replicas"] == 3
    # A stopping worker waits up to one lease (10 s) for its in-flight jobs.
    assert int(worker["stop_grace_period"].rstrip("s")) > Config().lease_ms // 1000


def test_environment_names_are_ones_the_code_reads(either: dict[str, Any]) -> None:
    needed = {
        "migrate": {"CODEMOJEX_DATABASE_URL"},
        "worker": {"CODEMOJEX_DATABASE_URL", "CODEMOJEX_VALKEY_URL", "CODEMOJEX_METRICS_TOKEN"},
        "web": {
            "CODEMOJEX_DATABASE_URL",
            "CODEMOJEX_VALKEY_URL",
            "CODEMOJEX_ADMIN_TOKEN",
            "CODEMOJEX_METRICS_TOKEN",
        },
    }
    for name, svc in app_services(either).items():
        env = svc.get("environment") or {}
        assert isinstance(env, dict), f"{name}: use the mapping form of environment"
        for var, value in env.items():
            assert var in KNOWN_VARS, f"{name}: {var} is read by nothing"
            for ref in re.findall(r"\$\{(\w+)", str(value)):
                assert ref in KNOWN_VARS or not ref.startswith("CODEMOJEX_"), ref
        role = _run_args(svc["command"]).command
        assert needed[role] <= set(env), f"{name} lacks {needed[role] - set(env)}"


def test_config_reads_every_value_compose_sets(either: dict[str, Any]) -> None:
    for svc in app_services(either).values():
        env = {
            k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v))  # a ${VAR:-default}: the default
            for k, v in svc["environment"].items()
            if k in CONFIG_VARS and ":?" not in str(v)
        }
        Config.from_env(env)  # a value Config cannot parse raises here


def test_urls_point_at_the_services_that_exist(either: dict[str, Any]) -> None:
    services = either["services"]
    for name, svc in app_services(either).items():
        env = svc["environment"]
        if "CODEMOJEX_VALKEY_URL" in env:
            m = re.fullmatch(
                rf"redis://:{VALKEY_PASSWORD}@([\w-]+):6379/0(\?cluster=true)?",
                env["CODEMOJEX_VALKEY_URL"],
            )
            assert m is not None and m[1] in services, name
        host = re.search(r"@([\w-]+):5432/", env["CODEMOJEX_DATABASE_URL"])
        assert host is not None and host[1] in services


def test_blocks_are_shared_through_anchors_not_copied() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    assert text.count("<<: *app") == 3  # migrate, web, worker
    assert text.count("build: .") == 1
    assert text.count("@valkey:6379") == 1
    assert text.count("postgresql://") <= 2  # the shared environment, and migrate's own


# -- dependencies, health, volumes -------------------------------------------------------------


def test_depends_on_names_conditions_and_volumes_exist(either: dict[str, Any]) -> None:
    services = either["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on with conditions"
        for dep, how in deps.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert how["condition"] in CONDITIONS, name
            if how["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], dep
            if how["condition"] == "service_completed_successfully":
                assert dep in ONE_SHOT, dep
        for volume in svc.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: {source} is not in the repository"
            elif not source.startswith("/"):
                assert source in either["volumes"], f"{name}: undeclared volume {source}"


def test_every_long_running_service_has_a_health_check(either: dict[str, Any]) -> None:
    for name, svc in either["services"].items():
        if name not in ONE_SHOT:
            test = svc["healthcheck"]["test"]
            assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


def test_app_health_checks_read_what_the_app_provides(compose: dict[str, Any]) -> None:
    _, web = _role(compose, "web")
    assert "/readyz" in " ".join(web["healthcheck"]["test"])
    assert f":{_run_args(web['command']).port}/" in " ".join(web["healthcheck"]["test"])
    _, worker = _role(compose, "worker")
    path = worker["environment"]["CODEMOJEX_HEALTH_FILE"]
    assert path in " ".join(worker["healthcheck"]["test"])


def test_valkey_is_durable_and_postgres_is_checked(compose: dict[str, Any]) -> None:
    valkey = compose["services"]["valkey"]
    assert valkey["image"].startswith("valkey/valkey:")
    argv = valkey["command"]
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "always"
    assert options["--maxmemory-policy"] == "noeviction"
    assert valkey["volumes"] and valkey["healthcheck"]
    postgres = compose["services"]["postgres"]
    assert postgres["image"].startswith("postgres:")
    assert postgres["volumes"] and "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_the_cluster_file_runs_the_queue_on_three_durable_masters(
    cluster: dict[str, Any],
) -> None:
    services = cluster["services"]
    nodes = sorted(n for n in services if re.fullmatch(r"valkey-\d+", n))
    assert nodes == ["valkey-1", "valkey-2", "valkey-3"]
    for node in nodes:
        argv = services[node]["command"]
        options = dict(zip(argv[1::2], argv[2::2], strict=True))
        assert options["--cluster-enabled"] == "yes"
        assert options["--appendfsync"] == "always"
        assert options["--maxmemory-policy"] == "noeviction"
        assert services[node]["volumes"][0].split(":")[0] in cluster["volumes"]
    init = " ".join(services["valkey-cluster-init"]["command"])
    assert "--cluster create" in init and "--cluster-replicas 0" in init
    assert all(node in init for node in nodes)
    for role in ("web", "worker"):
        name, svc = _role(cluster, role)
        url = svc["environment"]["CODEMOJEX_VALKEY_URL"]
        assert url.endswith("?cluster=true") and "@valkey-1:" in url, name
        assert svc["depends_on"]["valkey-cluster-init"]["condition"] == (
            "service_completed_successfully"
        )
        # the guesses queue over one partition per master; web and workers must agree
        assert svc["environment"]["CODEMOJEX_PARTITIONS"] == str(len(nodes)), name


# -- proxy, Prometheus, Grafana ----------------------------------------------------------------


def _nginx_blocks(text: str) -> dict[str, str]:
    """``{"upstream NAME": body, "location /ws": body, …}`` of an nginx config (no nesting
    below these is needed)."""
    text = re.sub(r"#[^\n]*", "", text)
    return {
        re.sub(r"\s+", " ", head.strip()): body
        for head, body in re.findall(r"((?:upstream|location)\s[^{;]+)\{([^{}]*)\}", text)
    }


def _server_level(conf: str) -> str:
    """The ``server { … }`` block without the blocks nested in it."""
    body = _nginx_location(re.sub(r"#[^\n]*", "", conf), r"server")
    assert body is not None
    return re.sub(r"\{[^{}]*\}", "{}", body)


def test_the_proxy_round_robins_over_web_and_carries_websockets(compose: dict[str, Any]) -> None:
    proxy = compose["services"]["proxy"]
    assert proxy["image"].startswith(("nginx:", "haproxy:", "caddy:"))
    mount = next(v for v in proxy["volumes"] if v.endswith(":/etc/nginx/nginx.conf:ro"))
    conf = (ROOT / mount.split(":")[0]).read_text(encoding="utf-8")
    blocks = _nginx_blocks(conf)
    web_name, web = _role(compose, "web")
    upstream = next(k for k in blocks if k.startswith("upstream "))
    servers = re.findall(r"^\s*server\s+(\S+)", blocks[upstream], re.MULTILINE)
    assert servers == [f"{web_name}:{_run_args(web['command']).port}"]
    # Round robin is nginx's default: no hash, ip_hash, sticky or least_conn.
    assert not re.search(r"\b(ip_hash|hash|sticky|least_conn)\b", blocks[upstream])
    ws = blocks["location /ws"]
    assert f"proxy_pass http://{upstream.split()[1]}" in ws
    # The headers are set once, for every location: a location with a proxy_set_header of
    # its own would inherit none of them (no X-Forwarded-For, no Host).
    server_level = _server_level(conf)
    assert re.search(r"proxy_set_header\s+Upgrade\s+\$http_upgrade\s*;", server_level)
    assert re.search(r"proxy_set_header\s+Connection\s+\$connection_upgrade\s*;", server_level)
    for head, body in blocks.items():
        assert "proxy_set_header" not in body, f"{head} drops the server's proxy headers"
    assert re.search(r"map\s+\$http_upgrade\s+\$connection_upgrade", conf)
    assert re.search(r"proxy_http_version\s+1\.1\s*;", conf)
    # The app checks a browser's Origin against Host: the proxy must not rewrite it.
    assert re.search(r"proxy_set_header\s+Host\s+\$http_host\s*;", conf)
    assert f"proxy_pass http://{upstream.split()[1]}" in blocks["location /"]


def test_web_trusts_the_proxys_forwarded_for_and_only_the_proxy_reaches_it(
    either: dict[str, Any],
) -> None:
    """Behind the proxy every player's TCP peer is the proxy: web must read the player's
    address from X-Forwarded-For (the new-player bucket is per address). That trust is safe
    only while nothing but the proxy can connect to web, and while the proxy replaces the
    header a client sent (appended to, with "*" uvicorn would take the client's own first
    entry); a range, not "*", keeps it safe behind a proxy that appends."""
    name, web = _role(either, "web")
    trusted = parse_forwarded_allow_ips(web["environment"].get("CODEMOJEX_FORWARDED_ALLOW_IPS", ""))
    assert trusted, "web trusts no proxy: every player would share the proxy's address"
    assert trusted != "*", "with * a client's own X-Forwarded-For entry would be its address"
    assert "ports" not in web, f"{name} is published: any client could claim to be a proxy"
    proxy = either["services"]["proxy"]
    # Exactly the proxy's own fixed address, on a network web shares with it, inside that
    # network's subnet: no other container can claim to be the proxy.
    fixed = {
        net: how["ipv4_address"]
        for net, how in proxy["networks"].items()
        if isinstance(how, dict) and "ipv4_address" in how
    }
    (net, address) = next(iter(fixed.items()))
    assert len(fixed) == 1 and trusted == address, (trusted, fixed)
    assert net in _networks(web)
    (pool,) = either["networks"][net]["ipam"]["config"]
    assert ipaddress.ip_address(address) in ipaddress.ip_network(pool["subnet"])
    assert ipaddress.ip_address(address).is_private
    assert proxy["ports"] and proxy["depends_on"][name]
    mount = next(v for v in proxy["volumes"] if v.endswith(":/etc/nginx/nginx.conf:ro"))
    conf = re.sub(r"#[^\n]*", "", (ROOT / mount.split(":")[0]).read_text(encoding="utf-8"))
    forwarded = re.search(r"proxy_set_header\s+X-Forwarded-For\s+(\S+)\s*;", conf)
    assert forwarded is not None, "the proxy does not tell web who the client is"
    assert forwarded[1] == "$remote_addr", "the proxy must not pass on a client's own header"


def _mount_target(svc: dict[str, Any], source: str) -> str:
    for volume in svc["volumes"]:
        parts = volume.split(":")
        if parts[0] == source:
            return parts[1]
    raise AssertionError(f"{source} is not mounted")


def test_prometheus_scrapes_every_web_and_worker_replica_where_they_listen(
    compose: dict[str, Any],
) -> None:
    prom = compose["services"]["prometheus"]
    target = _mount_target(prom, "./deploy/prometheus")
    assert f"--config.file={target}/prometheus.yml" in prom["command"]
    config = load(DEPLOY / "prometheus" / "prometheus.yml")
    for rule_file in config["rule_files"]:
        assert rule_file.startswith(target + "/")
        assert (DEPLOY / "prometheus" / rule_file.removeprefix(target + "/")).is_file()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    web_name, web = _role(compose, "web")
    worker_name, worker = _role(compose, "worker")
    env = worker["environment"]
    expected = {
        "codemojex-web": (web_name, _run_args(web["command"]).port),
        "codemojex-worker": (worker_name, int(env["CODEMOJEX_METRICS_PORT"])),
    }
    assert env["CODEMOJEX_METRICS_HOST"] == "0.0.0.0"  # reachable from another container
    for job_name, (service, port) in expected.items():
        job = jobs[job_name]
        assert job.get("metrics_path", "/metrics") == "/metrics"
        (sd,) = job["dns_sd_configs"]
        assert sd["names"] == [service] and sd["type"] == "A" and sd["port"] == port
        assert port in _container_port(compose["services"][service])
        assert compose["services"]["prometheus"]["depends_on"][service]


def test_grafana_is_provisioned_with_the_dashboard_and_prometheus(
    compose: dict[str, Any],
) -> None:
    grafana = compose["services"]["grafana"]
    provisioning = _mount_target(grafana, "./deploy/grafana/provisioning")
    assert provisioning == "/etc/grafana/provisioning"
    dashboards_at = _mount_target(grafana, "./deploy/grafana/dashboards")
    (provider,) = load(DEPLOY / "grafana/provisioning/dashboards/codemojex.yml")["providers"]
    assert provider["options"]["path"] == dashboards_at
    (source,) = load(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", source["url"]).groups()  # type: ignore[union-attr]
    assert host in compose["services"]
    assert int(port) in {container for _, _, container in _published(compose["services"][host])}
    dashboard = json.loads((DEPLOY / "grafana/dashboards/codemojex.json").read_text("utf-8"))
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert uids == {source["uid"]}
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_at}/codemojex.json"


# -- exposure and secrets ----------------------------------------------------------------------


def _published(svc: dict[str, Any]) -> list[tuple[str, str, int]]:
    """``(host_ip, host_port, container_port)`` of each port ``svc`` publishes, short syntax
    (``[IP:]HOST:CONTAINER[/proto]``) or long (``host_ip``, ``published``, ``target``); a
    mapping without an address is published on every interface (``0.0.0.0``)."""
    out = []
    for port in svc.get("ports") or []:
        if isinstance(port, dict):
            out.append((port.get("host_ip", "0.0.0.0"), str(port["published"]), port["target"]))
            continue
        text = str(port).split("/")[0]
        head, _, container = text.rpartition(":")
        ip, _, host = head.rpartition(":") if head.count(":") else ("", "", head)
        if ip.startswith("$"):  # ${VAR:-…} takes colons of its own: read it as a whole
            ip, host = "", head
        out.append((ip.strip("[]") or "0.0.0.0", host, int(container)))
    return out


def test_published_ports_parse() -> None:
    svc = {"ports": ["127.0.0.1:9090:9090", "${P:-8000}:80", "3000:3000/tcp", "[::1]:1:2"]}
    assert _published(svc) == [
        ("127.0.0.1", "9090", 9090),
        ("0.0.0.0", "${P:-8000}", 80),
        ("0.0.0.0", "3000", 3000),
        ("::1", "1", 2),
    ]


def test_only_the_proxy_is_published_beyond_loopback(either: dict[str, Any]) -> None:
    """Players reach the proxy; Grafana and Prometheus (and anything else published) are
    this machine's alone: bound to 127.0.0.1 (or ::1), not to every interface."""
    public = {}
    for name, svc in either["services"].items():
        for ip, host, container in _published(svc):
            if not ipaddress.ip_address(ip).is_loopback:
                public[name] = (ip, host, container)
    assert set(public) == {"proxy"}, public
    for name in ("grafana", "prometheus"):
        assert _published(either["services"][name]), f"{name} is not published at all"


def _required(value: str, var: str) -> bool:
    """Whether ``value`` is exactly ``${var:?message}``: compose stops, saying the message,
    when ``var`` is unset or empty."""
    return re.fullmatch(rf"\$\{{{var}:\?[^}}]+\}}", value) is not None


def test_every_secret_is_a_required_variable_without_a_default(either: dict[str, Any]) -> None:
    _, web = _role(either, "web")
    _, worker = _role(either, "worker")
    grafana = either["services"]["grafana"]
    for env, name, var in (
        (web["environment"], "CODEMOJEX_ADMIN_TOKEN", "CODEMOJEX_ADMIN_TOKEN"),
        (web["environment"], "CODEMOJEX_METRICS_TOKEN", "CODEMOJEX_METRICS_TOKEN"),
        (worker["environment"], "CODEMOJEX_METRICS_TOKEN", "CODEMOJEX_METRICS_TOKEN"),
        (grafana["environment"], "GF_SECURITY_ADMIN_PASSWORD", "GRAFANA_ADMIN_PASSWORD"),
    ):
        assert _required(str(env[name]), var), f"{name}: {env[name]!r} is not ${{{var}:?…}}"
    # Nowhere in either file does one of them get a default (${VAR:-…}, ${VAR-…}).
    for path in (COMPOSE, CLUSTER):
        text = path.read_text(encoding="utf-8")
        for var in REQUIRED_SECRETS:
            for use in re.findall(rf"\$\{{{var}([^}}]*)\}}", text):
                assert use.startswith(":?"), f"{path.name}: ${{{var}{use}}}"
    assert _required("${X:?set X}", "X") and not _required("${X:-x}", "X")
    assert not _required("${X}", "X") and not _required("${X:?}", "X")


def test_grafana_wants_a_login(either: dict[str, Any]) -> None:
    env = either["services"]["grafana"]["environment"]
    assert str(env.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "false"
    assert "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    assert str(env.get("GF_AUTH_DISABLE_LOGIN_FORM", "false")).lower() == "false"
    assert str(env.get("GF_AUTH_BASIC_ENABLED", "true")).lower() == "true"
    assert str(env.get("GF_USERS_ALLOW_SIGN_UP", "false")).lower() == "false"
    assert "GF_SECURITY_ADMIN_PASSWORD__FILE" not in env  # the one password, required above


def test_prometheus_scrapes_with_the_metrics_token(either: dict[str, Any]) -> None:
    """Web and workers want the token (CODEMOJEX_METRICS_TOKEN); Prometheus reads the same
    variable, as a compose secret from the environment, in its scrape configs."""
    prom = either["services"]["prometheus"]
    secrets = either["secrets"]
    (name,) = (s if isinstance(s, str) else s["source"] for s in prom["secrets"])
    assert secrets[name] == {"environment": "CODEMOJEX_METRICS_TOKEN"}
    config = load(DEPLOY / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job_name in ("codemojex-web", "codemojex-worker"):
        auth = jobs[job_name]["authorization"]
        assert auth.get("type", "Bearer") == "Bearer", job_name
        assert auth["credentials_file"] == f"/run/secrets/{name}", job_name
        assert "credentials" not in auth and "bearer_token" not in jobs[job_name]


def _nginx_location(text: str, head: str) -> str | None:
    """The body of the block ``head { … }`` (quoted strings may hold braces), or None."""
    start = re.search(rf"(?m)^\s*{head}\s*\{{", text)
    if start is None:
        return None
    depth, quote, i = 1, "", start.end()
    while depth:
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            depth += {"{": 1, "}": -1}.get(ch, 0)
        i += 1
    return text[start.end() : i - 1]


def test_the_proxy_does_not_route_metrics(compose: dict[str, Any]) -> None:
    """Prometheus scrapes each web replica directly; through the public proxy /metrics is
    404 (an exact location, which nginx matches on the normalised path, before location /)."""
    proxy = compose["services"]["proxy"]
    mount = next(v for v in proxy["volumes"] if v.endswith(":/etc/nginx/nginx.conf:ro"))
    conf = re.sub(r"(?m)^\s*#[^\n]*", "", (ROOT / mount.split(":")[0]).read_text("utf-8"))
    closed = _nginx_location(conf, r"location\s+=\s+/metrics")
    assert closed is not None, "no exact location for /metrics: location / would pass it on"
    assert re.search(r"^\s*return\s+404\b", closed, re.MULTILINE), closed
    assert "proxy_pass" not in closed
    # No other location names it (a regex one would win over location /, or pass it on).
    heads = re.findall(r"(?m)^\s*location\s+([^{]+)\{", conf)
    assert [h.strip() for h in heads if "metrics" in h] == ["= /metrics"], heads
    assert _nginx_location("location = /x { return 404 '{}'; }", "location = /x") == (
        " return 404 '{}'; "
    )


# -- production: Valkey's password, networks, tokens ------------------------------------------


def _networks(svc: dict[str, Any]) -> set[str]:
    nets = svc.get("networks")
    assert nets, "every service names its networks (the default one would join them all)"
    return set(nets)


def _valkeys(doc: dict[str, Any]) -> list[str]:
    return [n for n in doc["services"] if re.fullmatch(r"valkey(-\d+)?", n)]


def test_valkey_wants_a_required_password_that_every_client_carries(
    either: dict[str, Any],
) -> None:
    """Without it any container on Valkey's network could forge the events the hub pushes
    to players as scores. The password is ${VALKEY_PASSWORD:?…} everywhere: compose refuses
    to start without it."""
    services = either["services"]
    for name in _valkeys(either):
        svc = services[name]
        argv = svc["command"]
        assert argv[0] == "valkey-server"
        password = argv[argv.index("--requirepass") + 1]
        assert re.fullmatch(VALKEY_PASSWORD, password), f"{name}: {password!r}"
        # valkey-cli (the health check, the cluster's create) authenticates from the env.
        assert svc["environment"]["REDISCLI_AUTH"] == password, name
        assert "PONG" in " ".join(svc["healthcheck"]["test"]), name
    for name, svc in app_services(either).items():
        url = svc["environment"].get("CODEMOJEX_VALKEY_URL")
        if url is not None:
            assert re.match(rf"redis://:{VALKEY_PASSWORD}@", url), name
    if "valkey-cluster-init" in services:
        init = services["valkey-cluster-init"]
        assert re.fullmatch(VALKEY_PASSWORD, init["environment"]["REDISCLI_AUTH"])


def test_each_network_joins_only_what_talks_over_it(either: dict[str, Any]) -> None:
    """Prometheus and Grafana share no network with Valkey or PostgreSQL; Grafana reaches
    only Prometheus; every connection the deployment makes still has a network."""
    services = either["services"]
    nets = {name: _networks(svc) for name, svc in services.items()}
    assert set().union(*nets.values()) <= set(either["networks"])
    stores = [*_valkeys(either), "postgres"]
    for watcher in ("prometheus", "grafana"):
        for store in stores:
            assert not nets[watcher] & nets[store], f"{watcher} can reach {store}"
    web, _ = _role(either, "web")
    worker, _ = _role(either, "worker")
    for peer in nets["grafana"]:
        joined = {n for n, ns in nets.items() if peer in ns}
        assert joined == {"grafana", "prometheus"}, f"Grafana's network {peer}: {joined}"
    assert not nets["proxy"] & nets["postgres"] and not nets["proxy"] & nets[worker]
    talks = [
        ("proxy", web),
        ("prometheus", web),
        ("prometheus", worker),
        ("grafana", "prometheus"),
        (web, "postgres"),
        (worker, "postgres"),
        ("migrate", "postgres"),
    ]
    valkey_user = [web, worker] + (["valkey-cluster-init"] if "valkey-cluster-init" in nets else [])
    talks += [(client, store) for client in valkey_user for store in _valkeys(either)]
    for a, b in talks:
        assert nets[a] & nets[b], f"{a} cannot reach {b}"
    # The stores' network leads nowhere else.
    (back,) = set.intersection(*(nets[s] for s in stores))
    assert either["networks"][back].get("internal") is True


def test_workers_get_no_admin_token(either: dict[str, Any]) -> None:
    """Only web answers the admin API; a worker never reads the token."""
    for name, svc in app_services(either).items():
        if _run_args(svc["command"]).command != "web":
            assert "CODEMOJEX_ADMIN_TOKEN" not in svc["environment"], name


# -- the proxy's limits ------------------------------------------------------------------------


def _nginx_conf() -> str:
    return re.sub(r"#[^\n]*", "", (DEPLOY / "nginx" / "nginx.conf").read_text(encoding="utf-8"))


def _directive(conf: str, name: str) -> str:
    (value,) = re.findall(rf"^\s*{name}\s+([^;]+);", conf, re.MULTILINE)
    return str(value).strip()


def _seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m|h)?", value)
    assert m is not None, value
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m[2]]


def test_the_proxy_limits_each_address_far_above_a_crowd_of_honest_players() -> None:
    from web.connections import HTTP_ROOM

    conf = _nginx_conf()
    server = _server_level(conf)
    config = Config()
    zone = re.search(
        r"limit_req_zone\s+\$binary_remote_addr\s+zone=(\w+):\d+m\s+rate=(\d+)r/s", conf
    )
    assert zone is not None
    rate = int(zone[2])
    req = re.search(rf"limit_req\s+zone={zone[1]}\s+burst=(\d+)\s+nodelay\s*;", server)
    assert req is not None, "limit_req (with nodelay: a burst is served, not queued) per server"
    # An address carries a classroom: the players it may start at once, each loading the
    # page's ~10 requests, fit in the burst; a thousand players at one request a second, in
    # the rate; one player at the game's own limit is a small part of either.
    assert int(req[1]) >= config.player_burst * 10
    assert rate >= 1000 and rate >= 100 * config.guess_rate
    conn = re.search(r"limit_conn_zone\s+\$binary_remote_addr\s+zone=(\w+):", conf)
    assert conn is not None
    (cap,) = re.findall(rf"limit_conn\s+{conn[1]}\s+(\d+)\s*;", server)
    assert int(cap) == config.connections_per_address
    # nginx holds what two web replicas admit (each connection twice: client, upstream).
    replica = config.sockets_per_process + HTTP_ROOM
    workers = int(_directive(conf, "worker_connections"))
    assert workers >= 2 * 2 * replica
    assert int(_directive(conf, "worker_rlimit_nofile")) > workers


def test_the_proxys_refusals_are_the_contracts_json_and_its_timeouts_are_short() -> None:
    from web.connections import HEAD_TIMEOUT_S
    from web.server import KEEP_ALIVE_S

    conf = _nginx_conf()
    server = _server_level(conf)
    assert _directive(conf, "limit_req_status") == "503"
    assert _directive(conf, "limit_conn_status") == "503"
    refusals = {
        "503": ("503", "overloaded", True),
        "502": ("503", "unavailable", True),
        "413": ("413", "body_too_large", False),
    }
    pages: dict[str, tuple[str, str]] = {}
    for codes, forced, target in re.findall(
        r"error_page\s+([\d\s]+?)\s+(?:=(\d+)\s+)?(@\w+)\s*;", server
    ):
        for code in codes.split():
            pages[code] = (forced, target)
    for code, (status, error, retry_after) in refusals.items():
        forced, target = pages[code]
        body = _nginx_location(conf, rf"location\s+{target}")
        assert body is not None, target
        returned = re.search(r"return\s+(\d+)\s+'([^']*)'\s*;", body)
        assert returned is not None and returned[1] == status, (code, body)
        assert forced in ("", status), f"error_page {code} answers {forced or code}, not {status}"
        assert json.loads(returned[2])["error"] == error
        assert "default_type application/json" in body
        assert bool(re.search(r"add_header\s+Retry-After\s+\d+\s+always", body)) == retry_after
    # A replica's own answers are passed on: no retry of a 503 (the door's shedding) on the
    # other replica, no retry of a POST at all, nginx not rewriting a replica's errors.
    retried = _directive(conf, "proxy_next_upstream").split()
    assert set(retried) <= {"error", "timeout"}, retried
    assert "proxy_intercept_errors on" not in conf
    # Slow heads and bodies are cut as soon as the app cuts them; nginx drops an idle
    # upstream connection before the app does.
    assert _seconds(_directive(conf, "client_header_timeout")) <= HEAD_TIMEOUT_S
    assert _seconds(_directive(conf, "client_body_timeout")) <= HEAD_TIMEOUT_S
    assert _seconds(_directive(conf, "send_timeout")) <= 30
    upstream = _nginx_blocks(conf)["upstream codemojex_web"]
    (idle,) = re.findall(r"keepalive_timeout\s+(\w+)\s*;", upstream)
    assert _seconds(idle) < KEEP_ALIVE_S
    clients = re.findall(
        r"^\s*keepalive_timeout\s+(\w+)\s*;", conf.replace(upstream, ""), re.MULTILINE
    )
    assert len(clients) == 1 and _seconds(clients[0]) <= 75


# -- the image ---------------------------------------------------------------------------------


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


# -- docker compose itself, where it exists ----------------------------------------------------


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], check=False, capture_output=True, timeout=30
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        probe = subprocess.run(
            ["docker-compose", "version"], check=False, capture_output=True, text=True
        )
        if probe.returncode == 0 and re.search(r"v?2\.\d+", probe.stdout):
            return ["docker-compose"]
    return None


@pytest.mark.parametrize("files", [[COMPOSE], [COMPOSE, CLUSTER]], ids=["single", "cluster"])
def test_docker_compose_accepts_the_files(files: list[Path]) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Docker CLI with compose v2 here")
    argv = [*cli, *(a for f in files for a in ("-f", str(f))), "config", "--quiet"]
    env = {**os.environ, **{var: "x" * 32 for var in REQUIRED_SECRETS}}
    done = subprocess.run(
        argv, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


# -- the compose specification's own schema ----------------------------------------------------


def _check_compose_schema(*files: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against the compose-spec schema its wheel vendors (what `docker
    compose` validates with), so the files are checked where no Docker runs."""
    return subprocess.run(
        ["check-jsonschema", "--builtin-schema", "vendor.compose-spec", *map(str, files)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_both_compose_files_follow_the_compose_specification() -> None:
    done = _check_compose_schema(COMPOSE, CLUSTER)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_refuses_a_malformed_file(tmp_path: Path) -> None:
    # The validator bites: one wrong value in a copy of compose.yaml is refused.
    text = COMPOSE.read_text(encoding="utf-8")
    assert "restart: unless-stopped" in text
    bad = tmp_path / "compose.yaml"
    bad.write_text(text.replace("restart: unless-stopped", "restart: [sometimes]", 1))
    done = _check_compose_schema(bad)
    assert done.returncode != 0 and "restart" in done.stdout, done.stdout + done.stderr
