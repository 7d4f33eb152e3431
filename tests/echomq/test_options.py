"""A consumer's settings (echomq.consumer.options): checked once, with the values derived
from them; pure, no server."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from echomq.consumer import Consumer
from echomq.consumer.options import OPTION_NAMES, ConsumerOptions
from echomq.stalled import pulse_gap_ms


def test_the_consumers_signature_states_the_options_defaults() -> None:
    # Consumer(...) spells its keywords out for its readers and its API reference; the
    # values are ConsumerOptions' fields, and this keeps the two from drifting apart.
    def defaults(fn: Any) -> dict[str, Any]:
        return {
            n: p.default
            for n, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    options, consumer = defaults(ConsumerOptions), defaults(Consumer.__init__)
    assert options and {n: consumer.get(n, "missing") for n in options} == options


def test_the_consumer_passes_every_option_on_and_takes_no_other_keyword() -> None:
    keywords = {
        n
        for n, p in inspect.signature(Consumer.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert keywords == {*OPTION_NAMES, "meta", "probe", "hooks"}


def test_the_defaults_and_what_follows_from_them() -> None:
    o = ConsumerOptions()
    assert (o.lease_ms, o.concurrency, o.batch, o.prefetch, o.source) == (10_000, 1, 32, 0, "lanes")
    assert o.heartbeat_ms == 1_000  # once a second: well inside the 3 s lapse
    assert o.idle_heartbeat_ms == 5_000 and o.idle_lapse_ms == 15_000  # room for two lost beats
    assert o.reap_lock_ms == 3_000 + 1_000  # a dead reaper is replaced within lapse + interval
    assert o.pulse_gap_ms == pulse_gap_ms(3_000, 1_000, 1_000)
    assert o.grace_ms == o.lease_ms and o.suspect_ms == o.lease_ms
    assert o.worker_id.startswith("WRK_") and o.reaper and o.timeout_ms is None


def test_a_short_lapse_beats_three_times_within_it() -> None:
    o = ConsumerOptions(lapse_ms=600)
    assert o.heartbeat_ms == 200
    assert ConsumerOptions(lapse_ms=20).heartbeat_ms == 10  # never below 10 ms


def test_idle_beats_are_never_more_frequent_than_busy_ones() -> None:
    o = ConsumerOptions(heartbeat_ms=2_000, lapse_ms=10_000, idle_heartbeat_ms=500)
    assert o.idle_heartbeat_ms == 2_000
    assert o.idle_lapse_ms == 10_000  # never shorter than the busy lapse


def test_a_time_limit_bounds_how_long_a_suspect_holds_the_consumer() -> None:
    assert ConsumerOptions(lease_ms=5_000, timeout_ms=2_000).suspect_ms == 2_000
    assert ConsumerOptions(lease_ms=5_000, timeout_ms=9_000).suspect_ms == 5_000


def test_given_values_are_kept() -> None:
    o = ConsumerOptions(worker_id="WRK_x", grace_ms=0, reaper=False, source="jobs")
    assert (o.worker_id, o.grace_ms, o.reaper, o.source) == ("WRK_x", 0, False, "jobs")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lease_ms": 99}, ValueError, "lease_ms >= 100"),
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"prefetch": -1}, ValueError, "prefetch"),
        ({"batch": 1.5}, TypeError, "batch"),
        ({"heartbeat_ms": 3_000}, ValueError, "shorter than lapse_ms"),
        ({"probe_max_ms": 5_001}, ValueError, "probe_max_ms"),
        ({"park_max_ms": 9}, ValueError, "park_max_ms"),
        ({"source": "lane"}, ValueError, "source"),
        ({"timeout_ms": 0}, ValueError, "timeout_ms"),
        ({"grace_ms": -1}, ValueError, "grace_ms"),
    ],
)
def test_bad_settings_are_refused(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        ConsumerOptions(**kwargs)


def test_options_are_frozen() -> None:
    o = ConsumerOptions()
    with pytest.raises(AttributeError):
        o.lease_ms = 1  # type: ignore[misc]
