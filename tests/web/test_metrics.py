"""The web process's request metrics: labelled by route template, bounded label values."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.web.conftest import Served


def _requests(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "codemojex_http_requests_total"
    }


async def test_requests_are_counted_by_route_template_with_bounded_labels(served: Served) -> None:
    http = served.http
    for n in range(3):
        await http.get(f"/api/guesses/JOB_01ARZ3NDEKTSV4RRFFQ69G5F{n:02d}")  # 401: no token
        await http.get(f"/no/such/path/{n}")
        await http.request("PROPFIND", "/api/round")
    await http.delete("/api/round")
    text = (await http.get("/metrics")).text
    counted = _requests(text)
    assert counted[("/api/guesses/{job_id}", "GET", "401")] == 3
    assert counted[("<unmatched>", "GET", "404")] == 3
    assert counted[("/api/round", "other", "405")] == 3  # any other method is one value
    assert counted[("/api/round", "DELETE", "405")] == 1
    assert "JOB_01ARZ3NDEKTSV4RRFFQ69G5F" not in text and "/no/such" not in text
    latency = {
        s.labels["route"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "codemojex_http_request_duration_seconds_count"
    }
    assert "/api/guesses/{job_id}" in latency


async def test_the_format_follows_the_scrapers_accept_header(served: Served) -> None:
    plain = await served.http.get("/metrics")
    assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
    om = await served.http.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert om.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert om.text.rstrip().endswith("# EOF")
    for name in ("process_cpu_seconds_total", "python_gc_collections_total", "codemojex_queue_up"):
        assert name in plain.text


async def test_the_queue_series_come_from_echomq_metrics_under_both_names(served: Served) -> None:
    player = await served.new_player()
    rnd = await served.current_round()
    p = rnd["palette"]
    for _ in range(2):
        resp = await served.http.post(
            "/api/guesses",
            json={"round_id": rnd["round_id"], "guess": [p[0], p[1], p[1], p[2]]},
            headers={"Authorization": f"Bearer {player['token']}"},
        )
        assert resp.status_code == 202, resp.text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families((await served.http.get("/metrics")).text)
        for s in family.samples
    }
    queue = served.app.state.services.game.queues.name
    assert samples[("echomq_up", (("queue", queue),))] == 1
    assert samples[("codemojex_queue_up", ())] == 1
    for state in ("pending", "active", "scheduled", "completed", "dead"):
        ours = samples[("codemojex_queue_jobs", (("state", state),))]
        assert ours == samples[("echomq_jobs", (("queue", queue), ("state", state)))], state
    enqueued = samples[("echomq_transitions_total", (("queue", queue), ("transition", "enqueued")))]
    assert enqueued >= 2 and samples[("codemojex_queue_accepted_total", ())] == enqueued
    assert (
        samples[("codemojex_workers_alive", ())]
        == samples[("echomq_workers_alive", (("queue", queue),))]
    )
