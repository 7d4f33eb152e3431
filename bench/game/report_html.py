"""The HTML report (``--html``): the tables and plots of one run in a single file."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from bench.common import (
    png_data_uri,
)
from bench.game.tables import CROWD_HEAD, crowd_cells, fmt_codes, side_by_side


def write_html(path: Path, result: dict[str, Any]) -> None:
    """A self-contained page: the plots (embedded PNGs) and every row's main figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    x = [r["offered_per_s"] for r in rows]
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, style in (("p50", "o-"), ("p99", "s-"), ("max", "^--")):
        ax.plot(x, [r["accept_to_score_ms"][key] for r in rows], style, label=f"accept→score {key}")
    ax.plot(x, [r["send_to_202_ms"]["p99"] for r in rows], "x:", label="send→202 p99")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="offered guesses/s",
        ylabel="ms",
        title="latency vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    roles = sorted({role for r in rows for role in r["cpu"]["roles"]})
    for role in roles:
        ax.plot(
            x,
            [r["cpu"]["roles"].get(role, {}).get("ms_per_guess") for r in rows],
            "o-",
            label=role + (" (all)" if role == "worker" else ""),
        )
    ax.set(
        xscale="log",
        xlabel="offered guesses/s",
        ylabel="CPU ms per accepted guess",
        title="CPU per guess per process vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, x, "k:", label="offered")
    ax.plot(x, [r["accepted_per_s"] for r in rows], "o-", label="accepted/s")
    ax.plot(x, [r["scored_per_s"] for r in rows], "s-", label="scored/s")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="offered guesses/s",
        ylabel="guesses/s",
        title="throughput vs offered rate",
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    head = (
        "offered/s",
        "accepted/s",
        "scored/s",
        "429s",
        "errors",
        "p50 ms",
        "p99 ms",
        "max ms",
        "send→202 p99",
        "send lag p99",
        "web ms",
        "workers ms",
        "valkey ms",
        "client ms",
        "other load (cores)",
        "drained",
    )
    cells = []
    for r in rows:
        roles_ = r["cpu"]["roles"]
        vals = (
            r["offered_per_s"],
            r["accepted_per_s"],
            r["scored_per_s"],
            fmt_codes(r["refused"]),
            fmt_codes(r["errors"]),
            r["accept_to_score_ms"]["p50"],
            r["accept_to_score_ms"]["p99"],
            r["accept_to_score_ms"]["max"],
            r["send_to_202_ms"]["p99"],
            r["send_lag_p99_ms"],
            *(roles_.get(k, {}).get("ms_per_guess") for k in ("web", "worker", "valkey", "client")),
            r["cpu"]["others_cores"],
            "yes" if r["drained"] else "no",
        )
        cells.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in vals) + "</tr>")
    crowd = []
    configs = result.get("configs") or [{"title": result["title"], "rows": rows}]
    for c in configs:
        crowd_rows = [r for r in c["rows"] if "watchers" in r]
        if not crowd_rows:
            continue
        crowd.append(
            f"<h2>The crowd: {html.escape(c['title'])}</h2><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in CROWD_HEAD)
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in crowd_cells(r)) + "</tr>"
                for r in crowd_rows
            )
            + "</table>"
        )
    if crowd:
        crowd.append(
            "<p>Watchers are extra players whose sockets only read (their own process: "
            "bench/watchers/); per watcher, bytes and frames received a second over the "
            "load, mean (max over watchers); closes from the first send until drained, by "
            "close code; web RSS per socket = (the web processes' VmRSS with the crowd "
            "connected − before it connected) ÷ its sockets, idle (before the first window) "
            "and at the load's end.</p>"
        )
    if len(configs) > 1:
        heads, sections = side_by_side(configs)
        crowd.append(
            f"<h2>Configurations side by side (ratio = each ÷ {html.escape(heads[2])})</h2>"
            "<table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in heads)
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in line) + "</tr>"
                for lines in sections
                for line in lines
            )
            + "</table>"
        )
    m = result["machine"]
    page = f"""<!doctype html><meta charset="utf-8"><title>codemojex game path</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2em .5em;text-align:right}}
img{{max-width:100%}}</style>
<h1>The game path: open-loop guesses</h1>
<p>{html.escape(result["title"])}, each player with a socket;
{result["options"]["duration"]} s per rate, {html.escape(result["options"]["schedule"])} arrivals;
source {html.escape(str(result.get("source", {}).get("head", "?")))}
({len(result.get("source", {}).get("changed", []))} files changed beside it).
Machine: {html.escape(str(m["cpu"]))}, {m["cores"]} cores, load average {m["loadavg_1m"]:.2f}
at start (the client shares these cores).</p>
<table><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in head)}</tr>{"".join(cells)}</table>
{"".join(f'<p><img src="{src}"></p>' for src in figs)}
{"".join(crowd)}
<p>Latencies on the client's one clock: accept→score is the 202's arrival to the score's
arrival on the owner's socket. CPU is per accepted guess, from the first send until the drain
ended (a row that did not drain undercounts the workers); "other load" is the machine's CPU
used by processes that are not ours during the load.</p>
"""
    path.write_text(page)
