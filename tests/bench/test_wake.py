"""``bench.bench_wake`` on a tiny configuration, so the instrument cannot rot: every job is
measured in every mode, the halves add up to the whole, and the table names each mode. No
figure is held to a speed."""

from __future__ import annotations

import asyncio

import pytest
from rich.console import Console

from bench import bench_wake
from bench.common import embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_every_job_is_measured_in_every_mode_and_the_halves_add_up() -> None:
    results = bench_wake.measure(["always", "no"], jobs=40, rate=200, rounds=1, progress=False)
    assert set(results) == {"always", "no"}
    for rounds in results.values():
        (figures,) = rounds
        for half in bench_wake.HALVES:
            assert 0 < figures[f"{half}_p50"] <= figures[f"{half}_p99"]
        # each job's e2e is at least either half, so each percentile of it is too
        assert figures["e2e_p50"] >= figures["stamp_claimed_p50"]
        assert figures["e2e_p99"] >= figures["claimed_handler_p99"]
        # the bare hop beside it measured every stamp too; Valkey's spend per job is read
        assert 0 < figures["bare_p50"] <= figures["bare_p99"]
        assert figures["cmds"] >= 3  # an enqueue, a claim, a BLPOP at least, per job
        assert figures["script_us"] > 0 and figures["valkey_cpu_us"] > 0
    console = Console(record=True, width=200)
    console.print(bench_wake.table(results, 40, 200))
    text = console.export_text()
    assert "always" in text and "e2e × no" in text and "bare hop" in text


def test_the_bare_hop_takes_every_stamp_once() -> None:
    with embedded_server("no") as server:
        trips = asyncio.run(bench_wake.bare_run(server.url, 30, 200))
    assert len(trips) == 30 and all(t > 0 for t in trips)


def test_without_the_bare_hop_the_table_has_no_column_for_it() -> None:
    results = bench_wake.measure(["no"], jobs=20, rate=200, rounds=1, progress=False, bare=False)
    assert "bare_p50" not in results["no"][0]
    console = Console(record=True, width=200)
    console.print(bench_wake.table(results, 20, 200))
    assert "bare hop" not in console.export_text()


def test_each_job_is_counted_once() -> None:
    with embedded_server("no") as server:
        run = asyncio.run(bench_wake.one_run(server.url, 25, 200))
    assert {len(v) for v in run.values()} == {25}
    assert all(
        e == a + b for e, a, b in zip(run["e2e"], run["stamp_claimed"], run["claimed_handler"])
    )
