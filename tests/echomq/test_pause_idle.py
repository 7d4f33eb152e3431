"""A paused queue costs its idle consumers nothing more than an unpaused one: with jobs
waiting, a parked consumer's client commands per second stay within the idle bound (at
most one a second), read from ``INFO commandstats`` on a private server."""

from __future__ import annotations

import asyncio

import pytest

from bench.bench_time import idle_cost
from bench.common import embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_a_paused_consumer_with_work_waiting_does_not_poll() -> None:
    with embedded_server("no") as server:
        paused = asyncio.run(idle_cost(server.url, 4.0, True, "paused-idle"))
    assert paused <= 1.0
