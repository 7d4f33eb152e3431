"""``codemojex up`` end to end: a real Valkey, SQLite, web server and worker processes.

Guesses go in through the public HTTP API and come out scored; SIGTERM stops the whole tree
with no process left; a restart on the same data dir scores what was accepted before it.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from harness.running import Up, wait_until

pytestmark = pytest.mark.slow


def new_player(http: httpx.Client, name: str) -> str:
    r = http.post("/api/players", json={"name": name})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def submit(http: httpx.Client, token: str, count: int) -> list[str]:
    round_ = http.get("/api/round").json()
    palette, length = round_["palette"], round_["length"]
    jobs = []
    for i in range(count):
        guess = [palette[(i + k) % len(palette)] for k in range(length)]
        r = http.post(
            "/api/guesses",
            json={"round_id": round_["round_id"], "guess": guess},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 202, r.text
        jobs.append(str(r.json()["job_id"]))
    return jobs


def scores(http: httpx.Client, token: str, jobs: list[str]) -> list[dict[str, object] | None]:
    out = []
    for job in jobs:
        r = http.get(f"/api/guesses/{job}", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        out.append(r.json()["score"])
    return out


def alive_workers(http: httpx.Client, up: Up) -> dict[str, dict[str, object]]:
    r = http.get("/api/admin/workers", headers=up.admin())
    assert r.status_code == 200, r.text
    return {w["worker_id"]: w for w in r.json()["workers"] if w["alive"]}


def heartbeating_workers(
    http: httpx.Client, up: Up, n: int, timeout: float, without: object = None
) -> dict[str, dict[str, object]]:
    """Once ``n`` workers are alive and each has beaten (a worker spawned but not yet beating
    is alive with no pid), none of them with pid ``without``: their rows."""
    return dict(
        wait_until(
            lambda: (
                (w := alive_workers(http, up))
                and len(w) == n
                and all(x["pid"] for x in w.values())
                and without not in {x["pid"] for x in w.values()}
                and w
            ),
            timeout,
            f"{n} alive, heartbeating workers",
            logs=up.logs,
        )
    )


def client(up: Up) -> httpx.Client:
    return httpx.Client(base_url=up.base, timeout=5, trust_env=False)


def stop_and_check_nothing_is_left(up: Up) -> None:
    assert len(up.seen) >= 2, "up should have had children (valkey, web, …)"
    assert up.stop() == 0, up.logs()
    assert (
        wait_until(lambda: not up.leftovers(), 5, "every child of up to be gone", logs=up.logs)
        is True
    )
    assert "Traceback" not in up.logs(), up.logs()


@pytest.mark.timeout(120)
def test_up_scores_guesses_stops_without_orphans_and_resumes_after_restart(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "2", "--round-seconds", "60")
    with client(up) as http:
        token = new_player(http, "smoke")
        scored = submit(http, token, 3)
        wait_until(
            lambda: all(scores(http, token, scored)), 20, "the guesses to be scored", logs=up.logs
        )
        # Both heartbeating: a worker spawned but not yet beating is alive with no pid (CI
        # once saw one still starting after the other had scored all three guesses).
        workers = heartbeating_workers(http, up, 2, 10)
        assert {w["pid"] for w in workers.values()} <= up.track()
        player = {"Authorization": f"Bearer {token}"}
        assert http.get("/api/admin/workers", headers=player).status_code == 401
    second = Up(up.data_dir, "--workers", "0").start()  # the same data dir, while it runs
    assert second.proc is not None and second.proc.wait(20) == 2
    assert "another `codemojex up` is running" in second.logs()
    stop_and_check_nothing_is_left(up)

    # Web only: guesses are accepted and wait, unscored, in Valkey's AOF.
    web_only = start_up("--workers", "0", "--round-seconds", "60")
    assert web_only.admin_token == up.admin_token  # kept in the data dir
    with client(web_only) as http:
        assert alive_workers(http, web_only) == {}
        waiting = submit(http, token, 3)
        assert scores(http, token, waiting) == [None, None, None]
    stop_and_check_nothing_is_left(web_only)

    again = start_up("--workers", "2", "--round-seconds", "60")
    with client(again) as http:
        wait_until(
            lambda: all(scores(http, token, waiting)),
            20,
            "the guesses accepted before the restart to be scored",
            logs=again.logs,
        )
        assert all(scores(http, token, scored))
    stop_and_check_nothing_is_left(again)


@pytest.mark.timeout(120)
def test_up_with_partitions_scores_and_a_restart_of_another_layout_is_refused(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "1", "--partitions", "3", "--round-seconds", "60")
    with client(up) as http:
        tokens = [new_player(http, f"part{i}") for i in range(6)]
        jobs = {t: submit(http, t, 2) for t in tokens}
        for t, mine in jobs.items():
            wait_until(
                lambda t=t, mine=mine: all(scores(http, t, mine)),
                20,
                "every partition's guesses to be scored",
                logs=up.logs,
            )
        view = http.get("/api/admin/queue", headers=up.admin()).json()
        assert view["counters"]["scored"] == 12 and view["pending"] == 0
    stop_and_check_nothing_is_left(up)
    # The same data dir (the same Valkey AOF) under another count would strand guesses.
    other = Up(up.data_dir, "--workers", "0", "--partitions", "2").start()
    assert other.proc is not None and other.proc.wait(30) == 2, other.logs()
    assert "has 3 partition(s)" in other.logs() and "CODEMOJEX_PARTITIONS=3" in other.logs()
    wait_until(lambda: not other.leftovers(), 10, "the refused up's Valkey to stop")
