"""What a run prints and writes: the rich tables, and one self-contained HTML report whose
plots are inline SVG drawn here (no plotting library: matplotlib is only a dev dependency)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.compare.figures import FIGURES, MULTI_FIGURES, Figure

# The table's columns: (header, figures shown in it, digits)
COLUMNS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("drain steady\njobs/s", ("drain_steady_per_s",), 0),
    ("enqueue single / 10\njobs/s", ("enqueue_single_per_s", "enqueue_10_per_s"), 0),
    ("e2e p50 / p99\nms @rate", ("e2e_p50_ms", "e2e_p99_ms"), 1),
    ("Valkey cmds/job\nenqueue / drain", ("cmds_enqueue_per_job", "cmds_drain_per_job"), 1),
    ("CPU µs/job\nworker / Valkey", ("worker_cpu_us_per_job", "valkey_cpu_us_per_job"), 0),
)


SATURATED = (
    "†: the offered rate is above this peer's steady drain here, so its latency is mostly "
    "the backlog that grew while it ran"
)


def _mark(keys: tuple[str, ...], m: Mapping[str, Any], rate: float) -> str:
    """† on a latency cell whose peer drains slower than the latency run offers."""
    drain = m.get("drain_steady_per_s")
    return "†" if keys[0].startswith("e2e") and drain is not None and drain < rate else ""


def num(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}×"


def _rows(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(k, v) for k, v in report["peers"].items() if v.get("median")]


def print_tables(console: Console, report: Mapping[str, Any]) -> None:
    fastest = report.get("fastest_peer")
    rate = report["args"]["rate"]
    t = Table(
        title=f"EchoMQ beside its peers: medians of {report['args']['rounds']} interleaved "
        f"rounds, {report['args']['jobs']:,} no-op jobs, one worker process, e2e at {rate:g}/s",
        caption=f"dim: the ratio to the fastest peer ({fastest}) on the same figure; Valkey "
        f"cmds from INFO commandstats, the commands run inside scripts included. {SATURATED}",
    )
    t.add_column("queue")
    for header, _, _ in COLUMNS:
        t.add_column(header, justify="right")
    for key, peer in _rows(report):
        m, r = peer["median"], peer.get("ratios") or {}
        cells = []
        for _, keys, digits in COLUMNS:
            value = " / ".join(num(m.get(k), digits) for k in keys) + _mark(keys, m, rate)
            rat = " / ".join(ratio(r.get(k)) for k in keys)
            cells.append(f"{value}\n[dim]{rat}")
        name = f"[bold]{key}" if key.startswith("echomq") else key
        t.add_row(f"{name}\n[dim]{peer.get('version', '')}", *cells)
    console.print(t)
    c = report["ceiling"]
    console.print(
        f"  EVALSHA ceiling (trivial script, {c['reference_source']}): "
        f"{c['reference']:,.0f} calls/s on this Valkey"
    )
    for line in verdict_lines(report):
        console.print("  " + line)
    multi = report.get("multi") or {}
    if multi:
        mt = Table(title="EchoMQ lanes drained by several worker processes (medians)")
        mt.add_column("processes", justify="right")
        for f in MULTI_FIGURES:
            mt.add_column(f"{f.label}\n{f.unit}".strip(), justify="right")
        for procs, row in multi.items():
            m = row["median"]
            mt.add_row(
                procs,
                num(m.get("drain_steady_per_s"), 0),
                num(m.get("drain_total_per_s"), 0),
                num(m.get("cmds_drain_per_job"), 1),
                num(None if m.get("share_of_ceiling") is None else 100 * m["share_of_ceiling"], 1)
                + " %",
            )
        console.print(mt)
    for e in report.get("notes", []) + report.get("errors", []):
        console.print(f"[yellow]  {e}")


def verdict_lines(report: Mapping[str, Any]) -> list[str]:
    """The two target figures (drain against the fastest peer, share of the ceiling)."""
    out = []
    fastest = report.get("fastest_peer")
    for key, how in (
        ("echomq-lanes", ""),
        ("echomq-lanes-prefetch", ", prefetching as many again as it runs"),
    ):
        lanes = report["peers"].get(key, {}).get("median") or {}
        if fastest and lanes.get("drain_steady_per_s"):
            theirs = report["peers"][fastest]["median"]["drain_steady_per_s"]
            out.append(
                f"lanes drain from one worker process{how}: "
                f"{lanes['drain_steady_per_s']:,.0f} jobs/s = "
                f"{lanes['drain_steady_per_s'] / theirs:.2f}× the fastest peer ({fastest}, "
                f"{theirs:,.0f} jobs/s)"
            )
    multi = report.get("multi") or {}
    shares = [
        (procs, row["median"]["share_of_ceiling"])
        for procs, row in multi.items()
        if row.get("median", {}).get("share_of_ceiling") is not None
    ]
    if shares:
        procs, best = max(shares, key=lambda x: x[1])
        out.append(
            f"lanes drain from {procs} worker processes: {100 * best:.1f} % of the EVALSHA ceiling"
        )
    return out


# ---------------------------------------------------------------------------------------------
# HTML

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{padding:4px 10px;border-bottom:1px solid #ddd}
td{text-align:right}td:first-child,th:first-child{text-align:left}
.r{color:#888;font-size:12px}.ours{font-weight:600}figure{margin:1em 0}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:0 2em}
figcaption{font-weight:600;margin-bottom:.3em}code{background:#f4f4f4;padding:0 3px}
"""
_OURS, _THEIRS = "#2b6cb0", "#a0aec0"


def bar_chart(fig: Figure, rows: Sequence[tuple[str, float, float, float]]) -> str:
    """Horizontal bars (the median) with a whisker from the lowest to the highest round."""
    label_w, bar_w, row_h, top = 120, 310, 24, 8
    width, height = label_w + bar_w + 90, top + row_h * len(rows) + 24
    top_value = max((hi for _, _, _, hi in rows), default=0.0) or 1.0
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(fig.label)}">'
        )
    ]

    def x(v: float) -> float:
        return label_w + bar_w * v / top_value

    for i, (name, median, lo, hi) in enumerate(rows):
        y = top + i * row_h
        color = _OURS if name.startswith(("echomq", "lanes")) else _THEIRS
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end" font-size="13">'
            f"{html.escape(name)}</text>"
            f'<rect x="{label_w}" y="{y + 4}" width="{x(median) - label_w:.1f}" height="16" '
            f'fill="{color}"/>'
            f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="{y + 12}" y2="{y + 12}" '
            'stroke="#222" stroke-width="1.5"/>'
            f'<text x="{x(hi) + 6:.1f}" y="{y + 16}" font-size="12">{median:,.{_digits(median)}f}'
            f"</text>"
        )
    axis_y = top + row_h * len(rows) + 4
    parts.append(
        f'<line x1="{label_w}" x2="{label_w + bar_w}" y1="{axis_y}" y2="{axis_y}" stroke="#999"/>'
        f'<text x="{label_w}" y="{axis_y + 16}" font-size="11" fill="#666">0</text>'
        f'<text x="{label_w + bar_w}" y="{axis_y + 16}" font-size="11" fill="#666" '
        f'text-anchor="end">{top_value:,.{_digits(top_value)}f} {html.escape(fig.unit)}</text>'
        "</svg>"
    )
    return "".join(parts)


def _unit(fig: Figure) -> str:
    better = "higher is better" if fig.higher_is_better else "lower is better"
    return f"{fig.unit}, {better}" if fig.unit else better


def _digits(v: float) -> int:
    return 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2


def _spread(rounds: Sequence[Mapping[str, Any]], key: str) -> tuple[float, float] | None:
    values = [float(r[key]) for r in rounds if r.get(key) is not None]
    return (min(values), max(values)) if values else None


def _chart_rows(
    entries: Mapping[str, Mapping[str, Any]], key: str
) -> list[tuple[str, float, float, float]]:
    rows = []
    for name, e in entries.items():
        m = (e.get("median") or {}).get(key)
        spread = _spread(e.get("rounds") or [], key)
        if m is not None and spread is not None:
            rows.append((name, float(m), *spread))
    return rows


def _rounds_table(report: Mapping[str, Any]) -> str:
    """Every round of every peer, with the machine's load when it ran."""
    out = ["<h2>Every round</h2><table><tr><th>queue</th><th>round</th><th>load 1 min</th>"]
    out += [f"<th>{html.escape(h).replace(chr(10), '<br>')}</th>" for h, _, _ in COLUMNS]
    out.append("</tr>")
    for key, peer in report["peers"].items():
        for row in sorted(peer.get("rounds") or [], key=lambda r: r["round"]):
            out.append(
                f"<tr><td>{html.escape(key)}</td><td>{row['round']}</td>"
                f"<td>{row['loadavg_1m']:.2f}</td>"
            )
            out += [
                "<td>" + " / ".join(num(row.get(k), digits) for k in keys) + "</td>"
                for _, keys, digits in COLUMNS
            ]
            out.append("</tr>")
    for procs, multi in (report.get("multi") or {}).items():
        for row in sorted(multi.get("rounds") or [], key=lambda r: r["round"]):
            share = 100 * row["share_of_ceiling"]
            out.append(
                f"<tr><td>echomq-lanes x{html.escape(procs)}</td><td>{row['round']}</td>"
                f"<td>{row['loadavg_1m']:.2f}</td><td>{row['drain_steady_per_s']:,.0f}</td>"
                f"<td colspan=4 style='text-align:left'>{share:.1f} % of the EVALSHA ceiling, "
                f"{row['cmds_drain_per_job']:.1f} cmds/job</td></tr>"
            )
    out.append("</table>")
    return "".join(out)


def render_html(report: Mapping[str, Any]) -> str:
    a, m, c = report["args"], report["machine"], report["ceiling"]
    fastest = report.get("fastest_peer")
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<title>EchoMQ beside its peers</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>EchoMQ beside its peers</h1>",
        (
            f"<p>{a['jobs']:,} no-op jobs per peer and round, one worker process, "
            f"e2e latency of {a['e2e_jobs']:,} jobs enqueued open-loop at {a['rate']:g}/s; "
            f"medians of {a['rounds']} interleaved rounds (peer order rotated each round) on one "
            f"Valkey {html.escape(str(m.get('valkey')))} (appendfsync "
            f"{html.escape(str(a['appendfsync']))}, malloc "
            f"{html.escape(str(m.get('valkey_malloc', '-')))}), FLUSHALL between peers. "
            f"{html.escape(str(m.get('cpu')))}, {m.get('cores')} cores; load average "
            f"{report['load']['start']:.2f} at the start, "
            f"{report['load']['end']:.2f} at the end.</p>"
        ),
        "<table><tr><th>queue</th>",
    ]
    out += [f"<th>{html.escape(h).replace(chr(10), '<br>')}</th>" for h, _, _ in COLUMNS]
    out.append("</tr>")
    for key, peer in _rows(report):
        med, rat = peer["median"], peer.get("ratios") or {}
        cls = ' class="ours"' if key.startswith("echomq") else ""
        out.append(
            f"<tr{cls}><td>{html.escape(key)} <span class=r>{html.escape(peer['version'])}"
            "</span></td>"
        )
        for _, keys, digits in COLUMNS:
            value = " / ".join(num(med.get(k), digits) for k in keys) + _mark(keys, med, a["rate"])
            r = " / ".join(ratio(rat.get(k)) for k in keys)
            out.append(f"<td>{value}<br><span class=r>{r}</span></td>")
        out.append("</tr>")
    out.append(
        f"</table><p class=r>grey: the ratio to the fastest peer ({html.escape(str(fastest))}) "
        "on the same figure. Valkey cmds: INFO commandstats deltas, the commands run inside "
        f"scripts included. {html.escape(SATURATED)}.</p>"
    )
    out.append(
        f"<p>EVALSHA ceiling (a trivial script, {html.escape(c['reference_source'])}): "
        f"{c['reference']:,.0f} calls/s.</p><ul>"
    )
    out += [f"<li>{html.escape(line)}</li>" for line in verdict_lines(report)]
    out.append("</ul>")
    out.append(
        "<p class=r>Bars: the median over the rounds; whiskers: the lowest to the highest round."
        "</p><div class=charts>"
    )
    for fig in FIGURES:
        rows = _chart_rows(report["peers"], fig.key)
        if rows:
            out.append(
                f"<figure><figcaption>{html.escape(fig.label)} ({html.escape(_unit(fig))})"
                f"</figcaption>{bar_chart(fig, rows)}</figure>"
            )
    multi = report.get("multi") or {}
    if multi:
        named = {f"lanes x{k}": v for k, v in multi.items()}
        for fig in MULTI_FIGURES:
            rows = _chart_rows(named, fig.key)
            if rows:
                out.append(
                    f"<figure><figcaption>EchoMQ lanes, several processes: "
                    f"{html.escape(fig.label)} ({html.escape(_unit(fig))})</figcaption>"
                    f"{bar_chart(fig, rows)}</figure>"
                )
    out.append("</div>")
    out.append(_rounds_table(report))
    out.append(f"<h2>How it was measured</h2><pre>{html.escape(report['method'])}</pre>")
    for e in report.get("notes", []) + report.get("errors", []):
        out.append(f"<p class=r>{html.escape(e)}</p>")
    out.append("</body></html>")
    return "\n".join(out)
