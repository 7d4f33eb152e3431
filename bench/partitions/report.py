"""Medians over the repetitions, their ratios to the baseline, the table and the HTML report."""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any

from bench.common import (
    png_data_uri,
)
from bench.partitions.options import LANES


def run_figures(run: dict[str, Any]) -> dict[str, float]:
    """The figures a table row shows, from one run."""
    e, d = run["enqueue"], run["drain"]
    return {
        "masters_used": run["masters_used"],
        "enqueue_busiest_ms": max(e["master_ms_per_job"]),
        "drain_busiest_ms": max(d["master_ms_per_job"]),
        "busiest_ms": run["busiest_ms_per_job"],
        "all_masters_ms": run["all_masters_ms_per_job"],
        "ceiling_per_s": run["ceiling_per_s"],
        "drain_ceiling_per_s": run["drain_ceiling_per_s"],
        "enqueued_per_s": e["per_s"],
        "completed_per_s": d["per_s"],
        "busiest_master_cores_drain": max(d["master_cores"]),
        "workers_ms": d["workers_ms_per_job"],
        "workers_cores": d["workers_cores"],
        "client_cores_enqueue": e["client_cores"],
        "machine_cores_drain": d["machine_cores"],
        "others_cores_drain": d["others_cores"],
        "drain_s": d["seconds"],
        "main_thread_share": (
            sum(e["master_main_thread_ms_per_job"]) + sum(d["master_main_thread_ms_per_job"])
        )
        / max(1e-9, run["all_masters_ms_per_job"]),
    }


RATIOS = ("busiest_ms", "all_masters_ms", "ceiling_per_s", "completed_per_s")


def summarize(runs: list[dict[str, Any]], baseline: int) -> list[dict[str, Any]]:
    """Per partition count: the median of each figure, and the median of its ratio to the
    baseline's figure in the same repetition."""
    order = list(dict.fromkeys(r["partitions"] for r in runs))
    by_rep: dict[int, dict[int, dict[str, float]]] = {}
    for r in runs:
        by_rep.setdefault(r["rep"], {})[r["partitions"]] = run_figures(r)
    rows = []
    for n in order:
        mine = [reps[n] for reps in by_rep.values() if n in reps]
        row: dict[str, Any] = {"partitions": n, "runs": len(mine)}
        for key in mine[0]:
            row[key] = statistics.median(f[key] for f in mine)
        for key in RATIOS:
            ratios = [
                reps[n][key] / reps[baseline][key]
                for reps in by_rep.values()
                if n in reps and baseline in reps and reps[baseline][key]
            ]
            row[f"{key}_x"] = statistics.median(ratios) if ratios else float("nan")
        shares = [
            sorted(100 * j / max(1, sum(r["jobs_per_master"])) for j in r["jobs_per_master"])[::-1]
            for r in runs
            if r["partitions"] == n
        ]
        # Busiest first: which master is busiest is the name's CRC16, the same every run.
        row["share_pct"] = [statistics.median(s[i] for s in shares) for i in range(len(shares[0]))]
        rows.append(row)
    return rows


def table_lines(rows: list[dict[str, Any]], cores: int) -> list[str]:
    """Two Markdown tables: Valkey's work per job, then what the clients managed."""
    base = f"{rows[0]['partitions']} partition" + ("s" if rows[0]["partitions"] > 1 else "")
    out = [
        (
            "| partitions | masters used | jobs per master %, busiest first | busiest master "
            "ms/job: enqueue + drain = total | all masters ms/job | Valkey-bound ceiling "
            f"jobs/s | × {base} |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = " / ".join(f"{s:.0f}" for s in r["share_pct"])
        out.append(
            f"| {r['partitions']} | {r['masters_used']:.0f} | {share} "
            f"| {r['enqueue_busiest_ms']:.3f} + {r['drain_busiest_ms']:.3f} = "
            f"{r['busiest_ms']:.3f} | {r['all_masters_ms']:.3f} "
            f"| {r['ceiling_per_s']:,.0f} | {r['ceiling_per_s_x']:.2f} |"
        )
    out += [
        "",
        (
            f"| partitions | enqueued/s | completed/s | × {base} | workers CPU ms/job "
            f"| workers cores | busiest master cores | machine cores busy (of {cores}) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['partitions']} | {r['enqueued_per_s']:,.0f} | {r['completed_per_s']:,.0f} "
            f"| {r['completed_per_s_x']:.2f} | {r['workers_ms']:.3f} | {r['workers_cores']:.2f} "
            f"| {r['busiest_master_cores_drain']:.2f} | {r['machine_cores_drain']:.2f} |"
        )
    return out


def write_html(path: Path, result: dict[str, Any]) -> None:
    """A self-contained page: per-master CPU per job and ceiling against measured, as plots
    (embedded PNGs), and the tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, runs = result["rows"], result["runs"]
    labels = [str(r["partitions"]) for r in rows]
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4))
    # Median ms/job of each master (busiest first within each run), stacked.
    width = len(runs[0]["master_ms_per_job"])
    bottoms = [0.0] * len(rows)
    for i in range(width):
        vals = [
            statistics.median(
                sorted(run["master_ms_per_job"], reverse=True)[i]
                for run in runs
                if run["partitions"] == r["partitions"]
            )
            for r in rows
        ]
        ax.bar(labels, vals, bottom=bottoms, label=f"{i + 1}. busiest master")
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    ax.set(
        xlabel="partitions", ylabel="Valkey CPU ms per job", title="Valkey CPU per job, by master"
    )
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(labels, [r["ceiling_per_s"] for r in rows], "o-", label="Valkey-bound ceiling")
    ax.plot(labels, [r["completed_per_s"] for r in rows], "s-", label="completed/s measured")
    ax.set(xlabel="partitions", ylabel="jobs/s", title="ceiling vs measured", ylim=(0, None))
    ax.grid(True, alpha=0.3)
    ax.legend()
    figs.append(png_data_uri(fig))
    plt.close(fig)
    m, o = result["machine"], result["options"]
    tables = "<pre>" + html.escape("\n".join(result["table"])) + "</pre>"
    page = f"""<!doctype html><meta charset="utf-8"><title>echomq partitions</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}
img{{max-width:100%}}pre{{font-size:.85em}}</style>
<h1>Partitioned queues on a 3-master Valkey Cluster</h1>
<p>{o["jobs"]} jobs over {LANES} lanes per run, queue {html.escape(o["name"])},
{o["workers"]} worker processes, appendfsync {html.escape(o["appendfsync"])},
{o["repeat"]} repetitions (medians). Machine: {html.escape(str(m["cpu"]))}, {m["cores"]}
cores, load average {m["loadavg_1m"]:.2f} at start.</p>
{tables}
{"".join(f'<p><img src="{src}"></p>' for src in figs)}
<p>Valkey CPU from /proc/&lt;pid&gt;/stat of each master, per job of the logical queue; the
ceiling is 1000 / the busiest master's ms per job (enqueue + drain).</p>
"""
    path.write_text(page)
