"""``--report DIR``: ``results.json`` (the raw figures) and ``report.html`` (plots inline).

The plots need matplotlib (the ``report`` extra, ``pip install 'codemojex[report]'``, and
the dev dependency group): it is imported here, lazily, and without it the HTML says so and
carries the figures as tables only.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLOURS = {"honest": "#1f77b4", "masher": "#d62728"}


def write_report(results: dict[str, Any], directory: Path) -> list[Path]:
    """Write both files; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "results.json"
    data.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    page = directory / "report.html"
    page.write_text(render_html(results))
    return [data, page]


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plots(results: dict[str, Any]) -> dict[str, str] | None:
    """Title -> base64 PNG; None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    guesses = results["guesses"]
    kills = [k["at"] for k in results["kills"]]
    out: dict[str, str] = {}

    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    for kind, colour in COLOURS.items():
        # Clamped at 1 ms for the log scale: a score may overtake its own 202 (latency 0).
        mine = [g for g in guesses if g["kind"] == kind and g["latency"] is not None]
        if mine:
            ax.scatter(
                [g["accepted_at"] for g in mine],
                [max(1.0, g["latency"] * 1000) for g in mine],
                s=4,
                alpha=0.5,
                color=colour,
                label=kind,
            )
    for i, at in enumerate(kills):
        ax.axvline(
            at,
            color="black",
            linestyle="--",
            linewidth=0.8,
            label="worker killed" if i == 0 else None,
        )
    ax.set(
        xlabel="accepted at (s)",
        ylabel="202 → score (ms)",
        title="Acceptance-to-score latency per class",
    )
    ax.set_yscale("log")
    ax.legend(loc="upper left")
    out["latency over time"] = _png(fig)

    fig = Figure(figsize=(10, 3.5))
    ax = fig.add_subplot()
    accepted = Counter(int(g["accepted_at"]) for g in guesses)
    scored = Counter(int(g["scored_at"]) for g in guesses if g["scored_at"] is not None)
    end = max([*accepted, *scored, 0]) + 1
    ax.plot(range(end), [accepted[s] for s in range(end)], label="accepted/s")
    ax.plot(range(end), [scored[s] for s in range(end)], label="scored/s")
    for at in kills:
        ax.axvline(at, color="black", linestyle="--", linewidth=0.8)
    ax.set(xlabel="time (s)", ylabel="guesses per second", title="Throughput")
    ax.legend(loc="upper left")
    out["throughput"] = _png(fig)

    samples = results["queue"]
    if samples:
        fig = Figure(figsize=(10, 3.5))
        ax = fig.add_subplot()
        ts = [s["at"] for s in samples]
        for key in ("pending", "active", "lanes"):
            ax.plot(ts, [s[key] for s in samples], label={"lanes": "non-empty lanes"}.get(key, key))
        for at in kills:
            ax.axvline(at, color="black", linestyle="--", linewidth=0.8)
        ax.set(xlabel="time (s)", ylabel="jobs", title="Queue depth (GET /api/admin/queue)")
        ax.legend(loc="upper left")
        out["queue depth"] = _png(fig)
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(results: dict[str, Any]) -> str:
    verdict = results["verdict"]
    images = plots(results)
    if images is None:
        figures = (
            "<p><em>matplotlib is not installed (it comes with the report extra: "
            "<code>pip install 'codemojex[report]'</code>), so this report has no plots; "
            "results.json has every figure.</em></p>"
        )
    else:
        figures = "".join(
            f'<h2>{html.escape(title)}</h2><img alt="{html.escape(title)}" '
            f'src="data:image/png;base64,{png}">'
            for title, png in images.items()
        )
    problems = "".join(f"<li>{html.escape(p)}</li>" for p in verdict["problems"])
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in verdict["notes"])
    status = "passed" if verdict["ok"] else "FAILED"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>codemojex mash report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:right}}
code{{background:#f4f4f4;padding:.1em .3em}}</style></head><body>
<h1>codemojex mash — {status}</h1>
<p><code>{html.escape(verdict["line"])}</code></p>
<p>{html.escape(results["url"])}, {results["options"]["players"]} honest players and
{results["options"]["mashers"]} mashers for {results["options"]["duration"]} s,
started {html.escape(results["started_at"])}.</p>
<h2>Per class</h2>{_table(results["summary"]["classes"])}
<h2>Kills</h2>{_table(results["kills"]) or "<p>none</p>"}
{figures}
<h2>Problems (lost or doubled)</h2>{f"<ul>{problems}</ul>" if problems else "<p>none</p>"}
<h2>Notes</h2>{f"<ul>{notes}</ul>" if notes else "<p>none</p>"}
</body></html>
"""
