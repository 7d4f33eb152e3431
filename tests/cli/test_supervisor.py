"""The supervisor of ``codemojex up``: a dead worker comes back under a new id, and why it
died is on record; a kill order from the admin API kills the process wherever it runs; an
"Add worker" order starts one more; a dead embedded Valkey comes back; and ``up`` killed
outright takes its whole tree with it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis

import echomq
import echomq.ids
from codemojex import keys
from harness.running import Up, cmdline, is_running, wait_until
from tests.cli.test_up import alive_workers, client

pytestmark = pytest.mark.slow


def exits(conn: redis.Redis) -> dict[str, dict[str, Any]]:
    raw: dict[bytes, bytes] = conn.hgetall(keys.EXITS)  # type: ignore[assignment]
    return {k.decode(): orjson.loads(v) for k, v in raw.items()}


@pytest.mark.timeout(90)
def test_a_killed_worker_is_replaced_under_a_new_id_and_its_death_recorded(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "2")
    conn = redis.Redis.from_url(up.valkey_url, socket_timeout=5)
    try:
        with client(up) as http:

            def alive() -> dict[str, dict[str, Any]]:
                return alive_workers(http, up)

            first = wait_until(
                lambda: (a := alive()) and len(a) == 2 and all(w["pid"] for w in a.values()) and a,
                15,
                "two workers",
                logs=up.logs,
            )
            victim, info = min(first.items())
            assert info["pid"] in up.track()

            # A crash: SIGKILL from outside.
            os.kill(info["pid"], signal.SIGKILL)
            died = wait_until(lambda: exits(conn).get(victim), 10, "the exit record", logs=up.logs)
            assert died["reason"] == "killed (SIGKILL)"
            assert died["pid"] == info["pid"]
            second = wait_until(
                lambda: (
                    (a := alive())
                    and len(a) == 2
                    and victim not in a
                    and all(w["pid"] for w in a.values())
                    and a
                ),
                20,
                "a replacement worker, heartbeating",
                logs=up.logs,
            )
            (newcomer,) = set(second) - set(first)
            assert echomq.ids.is_branded(newcomer, "WRK")
            assert second[newcomer]["pid"] in up.track()

            # A kill order through the admin API: the order travels through Valkey.
            target = next(w for w in second if w in first)
            pid = second[target]["pid"]
            r = http.post(f"/api/admin/workers/{target}/kill", headers=up.admin())
            assert r.status_code == 202, r.text
            wait_until(lambda: not is_running(pid), 5, f"worker pid {pid} to die")
            died = wait_until(lambda: exits(conn).get(target), 10, "the exit record")
            assert died["reason"] == "killed (SIGKILL)"
            third = wait_until(
                lambda: (a := alive()) and len(a) == 2 and target not in a and a,
                20,
                "a second replacement",
                logs=up.logs,
            )
            assert not set(third) & {victim, target}

            # "Add worker": the supervisor starts one more, under the id the order carries.
            r = http.post("/api/admin/workers", headers=up.admin())
            assert r.status_code == 201, r.text
            added = r.json()["worker_id"]
            wait_until(
                lambda: (a := alive()) and len(a) == 3 and added in a,
                15,
                "the added worker",
                logs=up.logs,
            )

            # The embedded Valkey dies: it comes back from its AOF, records and all.
            (valkey,) = (p for p in up.track() if "valkey-server" in cmdline(p))
            os.kill(valkey, signal.SIGKILL)
            wait_until(
                lambda: (
                    (v := [p for p in up.track() if "valkey-server" in cmdline(p)])
                    and v != [valkey]
                ),
                10,
                "a new valkey-server",
                logs=up.logs,
            )
            wait_until(lambda: http.get("/healthz").status_code == 200, 10, "health again")
            assert exits(conn)[victim]["reason"] == "killed (SIGKILL)"
    finally:
        conn.close()

    # `up` killed outright: the kernel takes its children down with it (PDEATHSIG).
    assert up.proc is not None
    up.track()
    os.kill(up.proc.pid, signal.SIGKILL)
    up.proc.wait(5)
    wait_until(lambda: not up.leftovers(), 10, "every child of a SIGKILLed up to be gone")
