"""The door's figures for ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from web.door.gate import Gate


class GateCollector(Collector):
    """The door's figures for ``/metrics``: requests by what the door did, and now."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def collect(self) -> Iterator[Metric]:
        gate = self.gate
        outcomes = CounterMetricFamily(
            "codemojex_door_requests",
            "API requests by what the door did: admitted (at once or after queueing), "
            "bypassed (a refusal known without Valkey), shed_wait / shed_full / shed_share / "
            "shed_address (503 overloaded), body_timeout (408: the body did not arrive)",
            labels=["outcome"],
        )
        for outcome in (
            "admitted",
            "queued",
            "bypassed",
            "shed_wait",
            "shed_full",
            "shed_share",
            "shed_address",
            "body_timeout",
        ):
            outcomes.add_metric([outcome], gate.counts.get(outcome, 0))
        yield outcomes
        now = GaugeMetricFamily(
            "codemojex_door_requests_now", "API requests at the door now", labels=["state"]
        )
        now.add_metric(["working"], gate.working)
        now.add_metric(["resting"], gate.resting)
        now.add_metric(["waiting"], gate.waiting)
        yield now
        bound = GaugeMetricFamily(
            "codemojex_door_limit", "The door's bound now (adaptive, up to --door-in-flight)"
        )
        bound.add_metric([], gate.limit)
        yield bound
