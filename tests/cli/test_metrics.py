"""Metrics from every process of a real ``codemojex up``, and the deploy/ files that use them.

The web process serves ``/metrics`` on its HTTP port; each worker on its own port
(``up --metrics-port P``: P, P+1, …; a replacement takes the port of the worker it
replaces). Every metric name the alert rules (deploy/prometheus/alerts.yml) and the
Grafana dashboard (deploy/grafana/dashboards/codemojex.json) use must be one these real
processes export — checked against live scrapes, not a list kept by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from prometheus_client.parser import text_string_to_metric_families

from harness.helpers import free_port
from harness.running import Up, wait_until
from tests.cli.test_up import alive_workers, client

ROOT = Path(__file__).resolve().parent.parent.parent
PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "codemojex.json"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
# What Prometheus adds itself to every target.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}

_FUNCTIONS_AND_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


# -- PromQL: the metric names an expression reads ----------------------------------------------


def promql_metrics(expr: str) -> set[str]:
    """The metric names ``expr`` selects. Not a PromQL parser: enough for our rules — it
    drops strings, label matchers, ranges, grouping clauses and function calls, and what
    identifiers remain are metric names."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set(re.findall(r"(?<![\w.:$])([a-zA-Z_:][\w:]*)\b(?!\s*\()", text))
    return {n for n in names if n.lower() not in _FUNCTIONS_AND_KEYWORDS}


def test_promql_metrics_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(a_bucket{route!="/x",job=~"w.*"}'
        "[5m]))) > 0.5 and max(b_total) * on (instance) group_left (worker_id) c_info "
        '> 1e9 unless absent(up{job="web"} == 1)'
    )
    assert promql_metrics(expr) == {"a_bucket", "b_total", "c_info", "up"}


def alert_expressions() -> dict[str, str]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return {rule["alert"]: rule["expr"] for group in doc["groups"] for rule in group["rules"]}


def dashboard_expressions() -> dict[str, str]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return {
        f"{panel['title']} [{target['refId']}]": target["expr"]
        for panel in doc["panels"]
        for target in panel.get("targets", [])
    }


def test_the_alert_rules_and_the_dashboard_parse_and_say_what_they_need() -> None:
    alerts = alert_expressions()
    assert len(alerts) >= 10
    for name, expr in alerts.items():
        assert promql_metrics(expr), name
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule
            assert rule["annotations"]["summary"], rule
            assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    titles = " | ".join(p["title"] for p in panels).lower()
    for needed in (
        "queue depth",
        "accepted and scored",
        "accept → score",
        "reclaims",
        "dead jobs",
        "workers alive",
        "latency p99 by route",
        "cpu",
        "memory",
    ):
        assert needed in titles, needed
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    # Queue-wide series are reported by every web replica: never summed across them.
    for where, expr in {**alert_expressions(), **dashboard_expressions()}.items():
        assert not re.search(r"sum\b[^()]*\(\s*(rate\()?codemojex_(queue|reclaims|stale)", expr), (
            where
        )


def _promtool(*args: str, cwd: Path) -> None:
    if shutil.which("promtool") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool is not installed here: apt-get install prometheus")
    done = subprocess.run(
        ["promtool", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_accepts_the_config_and_the_rules_and_their_unit_tests(tmp_path: Path) -> None:
    _promtool("check", "rules", ALERTS.name, cwd=PROMETHEUS)
    _promtool("test", "rules", "alerts.test.yml", cwd=PROMETHEUS)
    # The config names the rules where compose mounts them; check it where they are here.
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text(encoding="utf-8"))
    config["rule_files"] = [str(PROMETHEUS / Path(f).name) for f in config["rule_files"]]
    # ... and the metrics token where promtool can find a file (compose mounts a secret).
    token = tmp_path / "metrics_token"
    token.write_text("t" * 32 + "\n", encoding="utf-8")
    for job in config["scrape_configs"]:
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(token)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    _promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    rules = [
        {"record": f"codemojex:panel_{i}", "expr": expr}
        for i, expr in enumerate(dashboard_expressions().values())
    ]
    doc = {"groups": [{"name": "dashboard", "rules": rules}]}
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    _promtool("check", "rules", "panels.yml", cwd=tmp_path)


# -- a real up ---------------------------------------------------------------------------------


def _free_port_pair() -> int:
    """A port P with P+1 free too (the two workers' metrics ports)."""
    for _ in range(100):
        port = free_port()
        if port >= 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


def _scrape(url: str, accept: str | None = None) -> tuple[str, dict[str, Any]]:
    headers = {"Accept": accept} if accept else {}
    resp = httpx.get(url, headers=headers, timeout=5, trust_env=False)
    assert resp.status_code == 200, resp.text
    return resp.text, dict(resp.headers)


def sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def _worker_id(text: str) -> str:
    ((labels, _),) = samples(text, "codemojex_worker_info")
    return labels["worker_id"]


@pytest.fixture
def up_with_metrics(start_up: Callable[..., Up]) -> Iterator[tuple[Up, int]]:
    port = _free_port_pair()
    up = start_up("--workers", "2", "--metrics-port", str(port))
    yield up, port


def _play_one_guess(http: httpx.Client) -> str:
    player = http.post("/api/players", json={"name": "Metrics"}).json()
    round_id = http.get("/api/round").json()["round_id"]
    auth = {"Authorization": f"Bearer {player['token']}"}
    resp = http.post("/api/guesses", json={"round_id": round_id, "guess": ["🍎"] * 4}, headers=auth)
    assert resp.status_code == 202, resp.text
    job_id = str(resp.json()["job_id"])

    def scored() -> bool:
        return http.get(f"/api/guesses/{job_id}", headers=auth).json()["score"] is not None

    wait_until(scored, 20, "the guess's score")
    http.post("/api/guesses", content=b"{", headers=auth)  # one refused submission too
    return job_id


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_process_exports_what_the_alerts_and_the_dashboard_read(
    up_with_metrics: tuple[Up, int],
) -> None:
    up, port = up_with_metrics
    workers = [f"http://127.0.0.1:{p}/metrics" for p in (port, port + 1)]

    def serving() -> bool:
        try:
            return all(_scrape(url)[0] for url in workers)
        except httpx.HTTPError:
            return False

    wait_until(serving, 20, "both workers' /metrics", logs=up.logs)
    with client(up) as http:
        job_id = _play_one_guess(http)
        web_text, web_headers = _scrape(f"{up.base}/metrics")
        om_text, om_headers = _scrape(f"{up.base}/metrics", OPENMETRICS)
    worker_texts = [_scrape(url)[0] for url in workers]

    # The format follows Accept (prometheus-client's own encoder and content type).
    assert web_headers["content-type"].startswith("text/plain; version=")
    assert om_headers["content-type"].startswith("application/openmetrics-text")
    assert om_text.rstrip().endswith("# EOF")

    # Requests are labelled by route template, never by the raw path.
    routes = {labels["route"] for labels, _ in samples(web_text, "codemojex_http_requests_total")}
    assert {"/api/guesses", "/api/guesses/{job_id}", "/api/players", "/api/round"} <= routes
    assert job_id not in web_text
    statuses = {
        (labels["route"], labels["method"], labels["status"])
        for labels, _ in samples(web_text, "codemojex_http_requests_total")
    }
    assert ("/api/guesses", "POST", "202") in statuses
    assert ("/api/guesses", "POST", "400") in statuses

    # Each worker reports itself, under its own id; between them they scored the guess.
    assert len({_worker_id(t) for t in worker_texts}) == 2
    scored = sum(v for t in worker_texts for _, v in samples(t, "codemojex_worker_scored_total"))
    assert scored == 1
    latencies = [
        v
        for t in worker_texts
        for _, v in samples(t, "codemojex_worker_accept_to_score_seconds_count")
    ]
    assert sum(latencies) == 1
    ((_, alive),) = samples(web_text, "codemojex_workers_alive")
    assert alive == 2

    # Every name a rule or a panel reads is one of these processes' real series.
    exported = sample_names(web_text) | SYNTHETIC
    for text in worker_texts:
        exported |= sample_names(text)
    for kind, exprs in (("alert", alert_expressions()), ("panel", dashboard_expressions())):
        for where, expr in exprs.items():
            missing = promql_metrics(expr) - exported
            assert not missing, f"{kind} {where} reads {missing}, which nothing exports"
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes"):
        assert name in sample_names(web_text) and all(name in sample_names(t) for t in worker_texts)
    assert "python_gc_collections_total" in sample_names(worker_texts[0])

    # A worker that dies is replaced on the same port, under a new id.
    with client(up) as http:
        victim = _worker_id(worker_texts[0])
        pid = alive_workers(http, up)[victim]["pid"]
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)

    def replaced() -> bool:
        try:
            text = _scrape(workers[0])[0]
        except httpx.HTTPError:
            return False
        return _worker_id(text) not in (victim, _worker_id(worker_texts[1]))

    wait_until(replaced, 30, "a new worker on the first metrics port", logs=up.logs)
