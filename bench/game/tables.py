"""The printed tables: per rate, the crowd's, and configurations side by side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table

from bench.game.options import LAG_OK_MS, console


def fmt_num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def fmt_codes(c: dict[str, int]) -> str:
    return " ".join(f"{k} {v:,}" for k, v in sorted(c.items())) or "0"


def print_tables(rows: list[dict[str, Any]], title: str) -> None:
    t = Table(title=f"{title}: throughput and latency")
    for col in (
        "offered/s",
        "send lag p99 ms",
        "accepted/s",
        "scored/s",
        "≥ 95 %",
        "429s",
        "other errors",
        "backlog at load end",
        "accept→score p50 ms",
        "p99 ms",
        "max ms",
        "send→202 p99 ms",
        "drain s",
        "every score once",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        lat = r["accept_to_score_ms"]
        ok = r["unscored"] == r["duplicate_scores"] == r["wrong_socket"] == 0
        backlog = r["backlog_at_load_end"]
        t.add_row(
            fmt_num(r["offered_per_s"]) + ("" if r["client_kept_schedule"] else " [red](late)"),
            fmt_num(r["send_lag_p99_ms"], 1),
            fmt_num(r["accepted_per_s"]),
            fmt_num(r["scored_per_s"]),
            "yes" if r["scored_ok"] else "[red]no",
            fmt_codes(r["refused"]),
            fmt_codes(r["errors"]),
            "-" if backlog is None else f"{backlog['pending'] + backlog['active']:,}",
            fmt_num(lat["p50"], 1),
            fmt_num(lat["p99"], 1),
            fmt_num(lat["max"], 1),
            fmt_num(r["send_to_202_ms"]["p99"], 1),
            fmt_num(r["drain_s"], 1),
            "yes"
            if ok
            else f"[red]{r['unscored']:,} not scored by the drain's end, "
            f"{r['duplicate_scores']} doubled, {r['wrong_socket']} on a wrong socket",
        )
    console.print(t)
    roles = sorted(
        {role for r in rows for role in r["cpu"]["roles"]}
        - {"web", "worker", "valkey", "up", "client"}
    )
    n_workers = max((len(r["cpu"]["workers"]) for r in rows), default=0)
    c = Table(
        title=f"{title}: CPU ms per accepted guess, first send to drained (share of "
        "one core during the load)"
    )
    for col in (
        "offered/s",
        "web",
        *(f"worker {i + 1}" for i in range(n_workers)),
        "Σ workers",
        "valkey",
        "up",
        *roles,
        "client",
        "all ours",
        "other load (cores)",
    ):
        c.add_column(col, justify="right")
    for r in rows:
        cpu = r["cpu"]

        def cell(d: dict[str, Any] | None) -> str:
            if d is None:
                return "-"
            return f"{d['ms_per_guess']:.3f} ({d['core_share'] * 100:.0f} %)"

        workers = [cell(w) for w in cpu["workers"]] + ["-"] * (n_workers - len(cpu["workers"]))
        c.add_row(
            fmt_num(r["offered_per_s"]) + ("" if r["drained"] else " [red](not drained)"),
            cell(cpu["roles"].get("web")),
            *workers,
            cell(cpu["roles"].get("worker")),
            cell(cpu["roles"].get("valkey")),
            cell(cpu["roles"].get("up")),
            *(cell(cpu["roles"].get(x)) for x in roles),
            cell(cpu["roles"].get("client")),
            f"{cpu['ours_ms_per_guess']:.3f}",
            f"{cpu['others_cores']:.2f}",
        )
    console.print(c)
    for r in rows:
        waits: dict[str, list[float]] = {}
        for p in r["cpu"]["processes"]:
            if p["runqueue_wait_share"] is not None:
                waits.setdefault(p["role"], []).append(p["runqueue_wait_share"] * 100)
        if waits:
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: share of the load each main thread "
                "waited for a CPU: "
                + ", ".join(
                    f"{role} {'/'.join(f'{w:.0f}' for w in ws)} %"
                    if len(ws) <= 4
                    else f"{role} ≤ {max(ws):.0f} %"
                    for role, ws in waits.items()
                )
            )
    for r in rows:
        notes = []
        if not r["client_kept_schedule"]:
            client = r["cpu"]["roles"].get("client", {}).get("core_share", 0) * 100
            waited = r["cpu"]["client_runqueue_wait_share"]
            notes.append(
                f"the client sent late (send lag p99 {r['send_lag_p99_ms']} ms, over "
                f"{LAG_OK_MS:g}; {r['sent_per_s']:,}/s sent of {r['offered_per_s']:,}/s "
                f"scheduled) using {client:.0f} % of a core"
                + (
                    ""
                    if waited is None
                    else f" and waiting {waited * 100:.1f} % of the load for one"
                )
                + f", beside {r['cpu']['others_cores']:.2f} cores of other load: the "
                "arrivals were burstier than the schedule"
            )
        if r["pipelined"]:
            notes.append(
                f"{r['pipelined']:,} sends found no idle connection and were pipelined "
                "behind unanswered requests"
            )
        if r["cpu"]["started"] or r["cpu"]["ended"]:
            notes.append(
                f"processes started in the window (counted from zero): "
                f"{r['cpu']['started']}; ended (their CPU not counted): "
                f"{r['cpu']['ended']}"
            )
        traffic = ", ".join(
            f"{k} {r['ws_messages_per_s'][k]:,.0f} msgs {r['ws_kib_per_s'][k]:,.0f} KiB"
            for k in r["ws_kib_per_s"]
        )
        notes.append(f"websocket traffic to the client, per second: {traffic}")
        if r["ws_closes"]:
            notes.append(f"websockets closed by the server: {r['ws_closes']}")
        if not r["drained"]:
            notes.append("the backlog did not drain in time: the next rate ran on a fresh up")
        for note in notes:
            console.print(f"  {r['offered_per_s']:,.0f}/s: {note}")
    if any("watchers" in r for r in rows):
        print_crowd(rows, title)


CROWD_HEAD = (
    "offered/s",
    "watchers open",
    "B/s per watcher (max)",
    "frames/s per watcher (max)",
    "frames/s all watchers",
    "progress/s per watcher",
    "watchers closed",
    "watcher CPU ms/s (core)",
    "web RSS MB before → crowd",
    "web KB/socket idle",
    "at load end",
    "accept→score p50 / p99 ms",
    "web ms/guess (core)",
)


def crowd_cells(r: dict[str, Any]) -> tuple[str, ...]:
    """One row's crowd figures as text (the console's table and the HTML's)."""
    c = r["watchers"]
    rss = c["web_rss"]
    web = r["cpu"]["roles"].get("web")
    lat = r["accept_to_score_ms"]
    return (
        fmt_num(r["offered_per_s"]),
        f"{c['open_at_load_end']:,} of {c['setup']['watchers']:,}",
        f"{fmt_num(c['bytes_per_s']['mean'])} ({fmt_num(c['bytes_per_s']['max'])})",
        f"{fmt_num(c['frames_per_s']['mean'], 2)} ({fmt_num(c['frames_per_s']['max'], 2)})",
        fmt_num(c["frames_per_s_all"]),
        fmt_num(c["progress_per_s"]["mean"], 2),
        fmt_codes(c["closed"]),
        f"{fmt_num(c['cpu_ms_per_s'], 1)} ({c['core_share'] * 100:.0f} %)",
        f"{rss['before_kb'] / 1024:,.0f} → {rss['idle_kb'] / 1024:,.0f}",
        fmt_num(rss["idle_kb_per_socket"], 1),
        fmt_num(rss["load_end_kb_per_socket"], 1),
        f"{fmt_num(lat['p50'], 1)} / {fmt_num(lat['p99'], 1)}",
        "-" if web is None else f"{web['ms_per_guess']:.3f} ({web['core_share'] * 100:.0f} %)",
    )


def print_crowd(rows: list[dict[str, Any]], title: str) -> None:
    t = Table(
        title=f"{title}: the crowd (watchers' sockets only read; rates over the load, "
        "closes first send to drained; web RSS per socket = (web RSS with the crowd − "
        "before it connected) ÷ sockets)"
    )
    for col in CROWD_HEAD:
        t.add_column(col, justify="right")
    for r in rows:
        if "watchers" in r:
            t.add_row(*crowd_cells(r))
    console.print(t)
    for r in rows:
        c = r.get("watchers")
        if c is None:
            continue
        setup = c["setup"]
        if c.get("closed_before"):
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: watchers closed by the server before this "
                f"window: {c['closed_before']}"
            )
        if setup["failed"]:
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: watchers that never connected: {setup['failed']}"
            )
        if "end_close" in c:
            e = c["end_close"]
            console.print(
                f"  {r['offered_per_s']:,.0f}/s: at the end, {e['clean']:,} of "
                f"{e['closing']:,} watcher sockets closed cleanly, {e['aborted']:,} aborted"
            )


def side_by_side_rows(
    row: dict[str, Any], crowd: bool | None = None
) -> list[tuple[str, float | None, int]]:
    """(figure, value, digits) of one row, for comparing configurations. ``crowd`` (default:
    the row has one) adds the crowd's figures, None where the row has no crowd, so that a
    configuration with 0 watchers lines up with one that has them."""
    web = row["cpu"]["roles"].get("web") or {}
    offered = row["offered_per_s"]
    out: list[tuple[str, float | None, int]] = [
        ("scored/s", row["scored_per_s"], 0),
        ("scored/s ÷ offered/s", row["scored_per_s"] / offered if offered else None, 2),
        ("accept→score p50 ms", row["accept_to_score_ms"]["p50"], 1),
        ("accept→score p99 ms", row["accept_to_score_ms"]["p99"], 1),
        ("web CPU ms/guess (Σ)", web.get("ms_per_guess"), 3),
        ("web share of a core (Σ)", web.get("core_share"), 2),
    ]
    c = row.get("watchers")
    if crowd is None:
        crowd = c is not None
    if crowd:
        figures: list[tuple[str, Callable[[dict[str, Any]], float], int]] = [
            ("watchers open at load end", lambda c: float(c["open_at_load_end"]), 0),
            ("B/s per watcher", lambda c: c["bytes_per_s"]["mean"], 0),
            ("frames/s all watchers", lambda c: c["frames_per_s_all"], 0),
            ("progress/s per watcher", lambda c: c["progress_per_s"]["mean"], 2),
            ("watchers closed", lambda c: float(sum(c["closed"].values())), 0),
            ("watcher CPU ms/s", lambda c: c["cpu_ms_per_s"], 1),
            ("web KB/socket idle", lambda c: c["web_rss"]["idle_kb_per_socket"], 1),
            ("web KB/socket at load end", lambda c: c["web_rss"]["load_end_kb_per_socket"], 1),
        ]
        out += [(name, None if c is None else get(c), digits) for name, get, digits in figures]
    return out


def config_name(c: dict[str, Any]) -> str:
    """What a configuration's column is called: "1 web, 9,800 watchers"."""
    return c.get("name") or f"{c['web_processes']} web, {int(c.get('watchers') or 0):,} watchers"


def side_by_side(configs: list[dict[str, Any]]) -> tuple[list[str], list[list[list[str]]]]:
    """The side-by-side table as text (the console's and the HTML's): its heads, and per
    rate of the first configuration the rows (offered/s, figure, each configuration's value,
    each one's ratio to the first's; "-" where there is none)."""
    names = [config_name(c) for c in configs]
    heads = ["offered/s", "figure", *names, *(f"{n} ÷ {names[0]}" for n in names[1:])]
    crowd = any("watchers" in r for c in configs for r in c["rows"])
    sections = []
    for i, first in enumerate(configs[0]["rows"]):
        each = [
            side_by_side_rows(c["rows"][i], crowd) if i < len(c["rows"]) else [] for c in configs
        ]
        lines = []
        for j, (name, _, digits) in enumerate(each[0]):
            got = [f[j][1] if j < len(f) else None for f in each]
            base = got[0]
            ratios = ["-" if v is None or not base else f"{v / base:.2f}×" for v in got[1:]]
            lines.append(
                [
                    fmt_num(first["offered_per_s"]) if j == 0 else "",
                    name,
                    *(fmt_num(v, digits) for v in got),
                    *ratios,
                ]
            )
        sections.append(lines)
    return heads, sections


def print_side_by_side(configs: list[dict[str, Any]]) -> None:
    """Every configuration's figures per rate, with each one's ratio to the first."""
    heads, sections = side_by_side(configs)
    t = Table(title=f"configurations side by side (ratio = each ÷ {heads[2]})")
    for k, h in enumerate(heads):
        t.add_column(h, justify="left" if k == 1 else "right")
    for lines in sections:
        for j, line in enumerate(lines):
            t.add_row(*line, end_section=j == len(lines) - 1)
    console.print(t)
