"""``bench.bench_nginx`` on a few thousand requests, so the instrument cannot rot: every
request of the proxied phase reaches the web, the refusing address is refused by nginx
itself, and the table names both phases. No figure is held to a speed.

The limit is the shipped one but slower (200/s, a burst of 1,000: still above each proxied
address's 1,000 requests): the shipped 1,000/s can only be passed by a web that answers
faster than that, which a suite on two busy cores does not."""

from __future__ import annotations

import pytest
from rich.console import Console

from bench import bench_nginx
from harness.nginx import require_nginx

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_both_phases_are_measured_and_printed() -> None:
    require_nginx()
    results = bench_nginx.measure(2000, limit_req=(200, 1000))
    proxied, refused = results["proxied"], results["refused"]
    assert proxied["requests"] == proxied["proxied"] == 2000, proxied["statuses"]
    assert proxied["refused"] == 0
    assert refused["requests"] == 2000
    assert refused["refused"] > 0 and refused["refused"] + refused["proxied"] == 2000
    assert proxied["nginx_cpu_s"] > 0 and proxied["web_cpu_s"] > 0
    assert results["nginx_us_per_proxied"] > 0 and results["refused_to_proxied"] != 0
    console = Console(record=True, width=200)
    console.print(bench_nginx.table(results))
    text = console.export_text()
    assert "within the limit" in text and "one address over it" in text
