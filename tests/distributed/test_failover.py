"""Failover under load, with ``codemojex web --durability replicated``: the master serving
the guesses' slot is SIGKILLed while players submit, its replica takes over (``CLUSTER
FAILOVER TAKEOVER``), the dead node comes back as the new master's replica. Every guess
answered ``202`` is scored (none lost), once; guesses that could not be confirmed on a
replica were answered ``503`` (never a 202 that a failover could take back); web and
workers reconnect on their own and no job is left held."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import httpx
import pytest

import echomq
from harness.cluster import ValkeyCluster
from harness.running import wait_until
from tests.distributed.game import Player, running

pytestmark = pytest.mark.slow

PLAYERS = 16


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ValkeyCluster]:
    cluster = ValkeyCluster(
        tmp_path / "cluster",
        masters=3,
        replicas=1,
        node_timeout_ms=1_000,
        extra_config={"enable-debug-command": "local"},  # DEBUG SLEEP: a stalled replica
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


class Load:
    """Players submitting guesses one after another in a thread; records every answer."""

    def __init__(self, base: str, players: list[Player], round_: dict[str, object]) -> None:
        self.base = base
        self.players = players
        self.round = round_
        self.acked: list[tuple[float, str]] = []  # (when, job_id) of each 202
        self.answers: collections.Counter[str] = collections.Counter()
        self.retry_after: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=5, trust_env=False) as http:
            n = 0
            while not self._stop.is_set():
                p = self.players[n % len(self.players)]
                n += 1
                try:
                    r = http.post(
                        "/api/guesses",
                        headers=p.headers,
                        json={"round_id": self.round["round_id"], "guess": ["🍎"] * 4},
                    )
                except httpx.HTTPError as e:  # no answer: not acknowledged
                    self.answers[type(e).__name__] += 1
                    continue
                self.answers[str(r.status_code)] += 1
                if r.status_code == 202:
                    self.acked.append((time.monotonic(), r.json()["job_id"]))
                elif r.status_code == 503:
                    self.retry_after.add(r.headers.get("Retry-After", ""))
                    time.sleep(0.05)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def acked_since(self, t: float) -> int:
        return sum(1 for when, _ in self.acked if when > t)


def _stats(cluster: ValkeyCluster) -> dict[str, object]:
    async def go() -> dict[str, object]:
        conn = cluster.client()
        try:
            return await echomq.Queue(conn, "guesses").stats()
        finally:
            await conn.aclose()

    return asyncio.run(go())


def _cut_off(cluster: ValkeyCluster, replica: int, seconds: float) -> threading.Thread:
    """The replica drops its link to its master and sleeps ``seconds`` (both in one
    pipeline, so it cannot reconnect in between): the master goes on alone, as in a
    network partition. Returns the thread waiting out the sleep."""

    def run() -> None:
        with cluster.admin(replica) as conn:
            conn.connection_pool.connection_kwargs["socket_timeout"] = seconds + 10
            pipe = conn.pipeline(transaction=False)
            pipe.execute_command("CLIENT", "KILL", "TYPE", "master")
            pipe.execute_command("DEBUG", "SLEEP", seconds)
            pipe.execute()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


FULL = os.environ.get("CODEMOJEX_CHAOS_FULL") == "1"


@pytest.mark.parametrize(
    "durability",
    [
        "replicated",
        # The measurement behind docs/reliability.md's table (the default mode loses the
        # guesses only the master held); with the chaos suite's full sizes only.
        pytest.param(
            "local",
            marks=pytest.mark.skipif(not FULL, reason="CODEMOJEX_CHAOS_FULL=1 measures it"),
        ),
    ],
)
def test_what_a_failover_loses_in_each_durability_mode(
    tmp_path: Path, cluster: ValkeyCluster, durability: str
) -> None:
    """replicated: no acknowledged guess is lost, the window answers 503. local (the
    default, AOF on the master alone): the guesses acknowledged while the replica was cut
    off are lost with the master; this is the window the replicated mode closes."""
    with contextlib.ExitStack() as stack:
        game = stack.enter_context(
            running(tmp_path, cluster.url, "--round-seconds", "600", "--guess-rate", "0")
        )
        base = game.web("--durability", durability)
        game.worker()
        game.worker()
        http = stack.enter_context(httpx.Client(base_url=base, timeout=10, trust_env=False))
        players = [Player(http, f"f{i}") for i in range(PLAYERS)]
        round_ = http.get("/api/round").json()
        master = cluster.master_of("emq:{guesses}:")
        (replica,) = cluster.replicas_of(master)

        with Load(base, players, round_) as load:
            wait_until(lambda: len(load.acked) >= 100, 30, "100 guesses acknowledged")
            cut = _cut_off(cluster, replica, 2.0)
            time.sleep(1.0)  # the master serves alone
            cluster.kill(master)  # SIGKILL, under load
            cut.join()
            cluster.promote(replica)  # CLUSTER FAILOVER TAKEOVER: the replica's data wins
            promoted_at = time.monotonic()
            time.sleep(1.5)
            if durability == "replicated":  # no replica to confirm: nothing is 202
                assert load.acked_since(promoted_at + 1.2) == 0
            cluster.node(master).start()  # back, as the new master's replica
            cluster.wait_ok()
            wait_until(lambda: cluster.replicas_of(replica) == [master], 30, "old master back")
            back_at = time.monotonic()
            wait_until(lambda: load.acked_since(back_at) >= 50, 60, "guesses acknowledged again")

        acked = {job for _, job in load.acked}
        assert len(acked) == len(load.acked)  # no job id acknowledged twice

        def settled() -> bool:
            s = _stats(cluster)
            return s["active"] == 0 and s["pending"] == 0 and s["scheduled"] == 0

        # No job held for ever: every lease the dead master took with it comes back.
        wait_until(settled, 60, "no job held or waiting", lambda: _stats(cluster))
        scored = game.scores()
        assert set(scored.values()) == {1}
        lost = acked - set(scored)
        assert _stats(cluster)["dead"] == 0
        for proc in [*game.workers, game.webs[0][0]]:
            assert proc.poll() is None  # nobody died of the failover: all reconnected
        print(
            f"\nfailover, {durability}: {len(acked)} acknowledged, {len(lost)} lost; "
            f"answers {dict(load.answers)}"
        )
        if durability == "replicated":
            assert not lost
            assert load.answers["503"] > 0 and load.retry_after == {"1"}
        else:
            assert lost  # the window is real: acknowledged by the master alone, then gone
