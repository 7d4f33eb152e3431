"""``bench.compare`` on a tiny configuration, so the instrument cannot rot: EchoMQ's driver
and SAQ's (a quick venv, cached under ~/.cache/codemojex/bench-venvs) through one round of a
few hundred jobs, then every figure in the JSON and every plot in the HTML. No figure is held to a speed.

SAQ's venv is made on first use from the package registry; where that cannot be reached the
test skips, saying so, unless ``CI`` is ``true`` (there it fails: CI must measure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.common import ROOT
from bench.compare import venvs
from bench.compare.figures import FIGURES, MULTI_FIGURES, drain_rates, latency_ms, percentile
from bench.compare.pins import BY_KEY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def saq_venv() -> Path:
    try:
        return venvs.ensure(BY_KEY["saq"], timeout=300)
    except venvs.VenvError as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"SAQ's venv could not be made (is the package registry reachable?): {e}")


class _Tags(HTMLParser):
    """Counts what a browser would lay out: tables, rows, SVG plots."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1


@pytest.mark.timeout(150)
def test_a_tiny_comparison_reports_every_figure_and_renders(saq_venv: Path, tmp_path: Path) -> None:
    out_json, out_html = tmp_path / "compare.json", tmp_path / "compare.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            *("--jobs", "300", "--e2e-jobs", "50", "--rounds", "1", "--procs", "2"),
            *("--ceiling-calls", "20000"),
            *("--peers", "echomq-lanes,echomq-lanes-prefetch,saq"),
            *("--logs", str(tmp_path / "logs")),
            *("--json", str(out_json), "--html", str(out_html)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out_json.read_text())
    assert report["errors"] == []
    assert report["fastest_peer"] == "saq"
    assert report["ceiling"]["reference"] > 0
    for key in ("echomq-lanes", "echomq-lanes-prefetch", "saq"):
        peer = report["peers"][key]
        assert len(peer["rounds"]) == 1
        for f in FIGURES:
            value = peer["median"][f.key]
            assert value is not None and value > 0, (key, f.key, value)
            assert peer["ratios"][f.key] is not None, (key, f.key)
    assert report["peers"]["saq"]["version"] == BY_KEY["saq"].version
    multi = report["multi"]["2"]["median"]
    for f in MULTI_FIGURES:
        assert multi[f.key] is not None and multi[f.key] > 0, f.key

    page = out_html.read_text(encoding="utf-8")
    tags = _Tags()
    tags.feed(page)
    # the summary (a header, 3 peers) and every round (a header, 3 peers, 1 multi-process)
    assert tags.tags.get("table") == 2 and tags.tags.get("tr") == 4 + 5
    svgs = [
        page[i : page.index("</svg>", i) + len("</svg>")]
        for i in range(len(page))
        if page.startswith("<svg", i)
    ]
    assert len(svgs) == len(FIGURES) + len(MULTI_FIGURES)
    for svg in svgs:  # each plot is well-formed SVG with a bar per peer
        root = ET.fromstring(svg)
        assert len(root.findall("{http://www.w3.org/2000/svg}rect")) >= 1
    assert "echomq-lanes" in page and "saq" in page


def test_steady_drain_leaves_out_the_ramp_and_the_tail() -> None:
    # 100 jobs: the first 10 slow (one per 10 ms), then 80 at one per ms, then a slow tail.
    t, times = 0, []
    for i in range(100):
        t += 10_000 if i < 10 or i >= 90 else 1_000
        times.append(t)
    steady, whole = drain_rates(reversed(times), go_us=0)
    assert steady == pytest.approx(1000.0, rel=0.02)
    assert whole == pytest.approx(100 / (times[-1] / 1e6))
    assert whole < steady / 2


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99
    assert latency_ms([1000, 2000, 3000])["max"] == 3.0
    with pytest.raises(ValueError):
        percentile([], 0.5)
