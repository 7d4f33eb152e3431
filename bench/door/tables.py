"""The printed tables: each row's honest figures, the mashers' answers, the costs."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from bench.door.options import row_label

# -- report ------------------------------------------------------------------------------------


def fmt_num(x: Any, unit: str = "") -> str:
    return "—" if x is None else f"{x:,}{unit}"


def baseline(rows: list[dict[str, Any]], figure: str) -> float | None:
    """The honest p99 alone: the median of the alone rows' (the first and the last, by
    default: a shared machine's quiet and busy spells fall on either)."""
    got = [r["honest"][figure]["p99"] for r in rows if not r["mashers_n"]]
    alone: list[float] = sorted(float(x) for x in got if x is not None)
    if not alone:
        return None
    mid = len(alone) // 2
    return alone[mid] if len(alone) % 2 else (alone[mid - 1] + alone[mid]) / 2


def _side(r: dict[str, Any], side: str) -> str:
    cores = r["cores"].get(side)
    each = r.get("cpu_ms_per_accepted", {}).get(side)
    return f"{fmt_num(cores)} / {fmt_num(each)}"


def print_tables(result: dict[str, Any], console: Console) -> None:
    rows = result["rows"]
    base = baseline(rows, "send_to_score_ms")
    base_202 = baseline(rows, "send_to_202_ms")
    t = Table(
        title="Honest players beside mashers (ratios to the honest players alone, the median "
        "of the alone rows of the same run)",
        title_justify="left",
    )
    for col in (
        "mashers",
        "honest send→score p50 / p99 ms",
        "× alone",
        "p99 after 3 s",
        "honest send→202 p99 ms",
        "× alone",
        "honest accepted",
        "honest other answers",
        "what the mashers were told",
        "server: cores / CPU ms per accepted guess",
        "clients: cores / CPU ms per accepted guess",
        "web waited for a CPU",
        "door bound / working / waiting",
        "mash verdict",
    ):
        t.add_column(
            col,
            justify="left"
            if col
            in ("mashers", "mash verdict", "what the mashers were told", "honest other answers")
            else "right",
        )
    for r in rows:
        h = r["honest"]
        p99 = h["send_to_score_ms"]["p99"]
        p99_202 = h["send_to_202_ms"]["p99"]
        share = h["accepted_share"]
        m = r["mashers"]
        told = ", ".join(f"{v:,} × {k}" for k, v in m["statuses"].items()) if m else "—"
        replay = r.get("replay")
        if replay is not None:
            told = f"{replay.get('connects', 0):,} connects, {replay.get('gaps', 0):,} gaps" + (
                f" ({replay['events_in_stream']:,} events in the stream)"
                if replay.get("events_in_stream") is not None
                else ""
            )
        verdict = r["verdict"].split(", kills")[0] if r["verdict"] else ""
        t.add_row(
            row_label(r["mashers_n"], r["addresses"], r.get("spread", False)),
            f"{fmt_num(h['send_to_score_ms']['p50'])} / {fmt_num(p99)}",
            f"{p99 / base:.1f}×" if p99 and base else "—",
            fmt_num(h["steady_send_to_score_p99_ms"]),
            fmt_num(p99_202),
            f"{p99_202 / base_202:.1f}×" if p99_202 and base_202 else "—",
            f"{h['accepted']:,} of {h['sent']:,} ({100 * share:.1f} %)"
            if share is not None
            else "—",
            ", ".join(f"{v} × {k}" for k, v in h["not_accepted"].items()) or "none",
            told,
            _side(r, "server"),
            _side(r, "client"),
            fmt_num(round(100 * r["cores"].get("web@wait", 0), 1), " %"),
            " / ".join(fmt_num(r["door"].get(k)) for k in ("limit", "working", "waiting")),
            verdict + ("" if r["exit"] == 0 else f" (exit {r['exit']})"),
        )
    console.print(t)
    console.print(pinned_line(result))
    c = result["costs"]
    if c is None:
        return
    t = Table(
        title="What an answer costs the web process (CPU from /proc, idle subtracted)",
        title_justify="left",
    )
    for col in ("answer", "count", "web CPU ms each", "of an accepted guess", "statuses"):
        t.add_column(col, justify="left" if col in ("answer", "statuses") else "right")
    acc = c["accepted"]["web_cpu_ms_each"]
    for name, label in (
        ("accepted", "202 accepted guess"),
        ("refused_429", "429 rate_limited, from the bucket mirror (no Valkey)"),
        ("overloaded_503", "503 overloaded, shed from the door's queue"),
    ):
        each = c[name]["web_cpu_ms_each"]
        t.add_row(
            label,
            f"{c[name]['count']:,}",
            fmt_num(each),
            f"{each / acc:.2f}" if each is not None and acc else "—",
            str(c[name]["statuses"]),
        )
    console.print(t)
    m = result["machine"]
    console.print(
        f"web idle {c['idle_cores']} cores · machine: {m.get('cpu', '?')}, "
        f"{m.get('cores', '?')} cores, shared · {len(rows)} rows of "
        f"{result['options']['duration']} s on one `codemojex up`"
    )


def pinned_line(result: dict[str, Any]) -> str:
    """Where each side ran, as /proc said at each row's end (every server process) and at
    each masher process's start."""
    server = sorted(
        {c for r in result["rows"] for k, c in r.get("pinned", {}).items() if k != "bench"}
    )
    client = sorted(
        {r["pinned"]["bench"] for r in result["rows"] if "bench" in r.get("pinned", {})}
        | {c for r in result["rows"] for c in ((r["mashers"] or {}).get("pinned") or {}).values()}
    )
    pin = result.get("pin")
    head = f"pinned: server on CPU {pin[0]}, clients on CPU {pin[1]}" if pin else "not pinned"
    if result.get("nginx"):
        head = f"through nginx (compose's config, on the server's side) · {head}"
    return (
        f"{head}; Cpus_allowed_list seen: server processes {', '.join(server) or '—'}, "
        f"client processes {', '.join(client) or '—'}"
    )
