"""One configuration measured: the warm-up, each rate's window and drain on a fresh or reused
``up``, the crowd of watchers, and each window's figures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.game.client import GameClient
from bench.game.http import Window
from bench.game.options import LAG_OK_MS, SCORED_OK, Options, console, up_env, watcher_processes
from bench.game.server import (
    CpuSnapshot,
    Processes,
    cpu_figures,
    database,
    start_up,
    up_args,
    web_rss_kb,
)
from bench.watchers.fleet import Fleet
from bench.watchers.fleet import figures as watcher_figures
from codemojex.mash.ledger import percentile as pct
from harness.running import Up


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def window_figures(w: Window, cpu: dict[str, Any], client: GameClient) -> dict[str, Any]:
    guesses = w.guesses
    accepted = [g for g in guesses if g.status == 202]
    scored = [g for g in accepted if g.scored is not None]
    end = w.t0 + w.duration
    a2s = sorted(max(0.0, g.scored - g.answered) for g in scored)  # type: ignore[operator]
    s2s = sorted(g.scored - g.sent for g in scored)  # type: ignore[operator]
    s2a = sorted(g.answered - g.sent for g in guesses if g.status)  # type: ignore[operator]
    lag = sorted(g.sent - g.scheduled for g in guesses)
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for g in guesses:
        if g.status == 429:
            refused[g.error or "?"] += 1
        elif g.status != 202:
            errors[f"{g.status} {g.error}" if g.status else str(g.error)] += 1
    offered = len(guesses) / w.duration
    scored_in_window = sum(1 for g in scored if (g.scored or 0.0) <= end)
    lag_p99 = _ms(pct(lag, 99))
    late_scores = sum(1 for jid in client.early)
    return {
        "rate": w.rate,
        "duration_s": w.duration,
        "offered_per_s": round(offered, 1),
        "sent": len(guesses),
        "sent_per_s": round(len(guesses) / max(w.duration, w.load_end - w.t0), 1),
        "send_lag_p50_ms": _ms(pct(lag, 50)),
        "send_lag_p99_ms": lag_p99,
        "send_lag_max_ms": _ms(lag[-1] if lag else None),
        "client_kept_schedule": lag_p99 is not None and lag_p99 <= LAG_OK_MS,
        "pipelined": w.pipelined,
        "accepted": len(accepted),
        "accepted_per_s": round(
            sum(1 for g in accepted if (g.answered or 0.0) <= end) / w.duration, 1
        ),
        "scored_per_s": round(scored_in_window / w.duration, 1),
        "scored_ok": scored_in_window / w.duration >= SCORED_OK * offered,
        "scored": len(scored),
        "unscored": len(accepted) - len(scored),
        "duplicate_scores": sum(g.scores - 1 for g in scored if g.scores > 1),
        "wrong_socket": sum(1 for g in scored if g.scored_on != g.player),
        "unknown_scores": late_scores,
        "score_before_202": w.score_before_202,
        "unanswered": sum(1 for g in guesses if g.answered is None),
        "refused": dict(refused),
        "errors": dict(errors),
        "accept_to_score_ms": {
            "p50": _ms(pct(a2s, 50)),
            "p90": _ms(pct(a2s, 90)),
            "p99": _ms(pct(a2s, 99)),
            "max": _ms(a2s[-1] if a2s else None),
        },
        "send_to_score_p99_ms": _ms(pct(s2s, 99)),
        "send_to_202_ms": {
            "p50": _ms(pct(s2a, 50)),
            "p99": _ms(pct(s2a, 99)),
            "max": _ms(s2a[-1] if s2a else None),
        },
        "backlog_at_load_end": w.backlog,
        "drained": w.drained,
        "drain_s": round(w.drain_end - w.load_end, 2),
        "ws_messages_per_s": {
            k: round(v / max(1e-9, w.drain_end - w.t0), 1) for k, v in sorted(w.ws_messages.items())
        },
        "ws_kib_per_s": {
            k: round(v / 1024 / max(1e-9, w.drain_end - w.t0), 1)
            for k, v in sorted(w.ws_bytes.items())
        },
        "ws_closes": dict(w.ws_closes),
        "round_rotations": client.rotations,
        "cpu": cpu,
    }


class Crowd:
    """The watchers of one ``up`` (``opts.watchers`` sockets that only read) and the web
    processes' resident set before and after they connected."""

    def __init__(self, fleet: Fleet, rss_before: tuple[int, int]) -> None:
        self.fleet = fleet
        self.rss_before_kb, self.web_processes = rss_before
        self.rss_idle_kb = 0
        self.idle_sockets = 0
        self.setup: dict[str, Any] = {}

    @classmethod
    async def start(
        cls, up: Up, client: GameClient, opts: Options, progress: Progress | None
    ) -> Crowd:
        procs = Processes(up.proc.pid if up.proc else 0)
        crowd = cls(
            Fleet(
                client.host,
                client.port,
                opts.watchers,
                watcher_processes(opts),
                f"w{os.getpid() % 1000}-{int(time.time()) % 100000}",
                opts.watcher_concurrency,
            ),
            web_rss_kb(procs.roles()),
        )
        tasks: list[Any] = []
        if progress is not None:
            tasks = [
                progress.add_task("players", total=opts.watchers, info="watchers signing up"),
                progress.add_task("sockets", total=opts.watchers, info="watchers connecting"),
            ]

        def shown(created: int, connected: int, failed: int) -> None:
            if progress is not None:
                progress.update(tasks[0], completed=created)
                progress.update(tasks[1], completed=connected, info=f"failed {failed:,}")
                progress.refresh()

        began = time.monotonic()
        await crowd.fleet.start(shown)
        if progress is not None:
            ready = crowd.fleet.ready
            shown(sum(int(r["created"]) for r in ready), crowd.fleet.connected, 0)
        failed: Counter[str] = Counter()
        for r in crowd.fleet.ready:
            failed.update(r["failed"])
        await asyncio.sleep(1.0)  # the greetings' buffers are sent and freed
        crowd.rss_idle_kb, _ = web_rss_kb(procs.roles())
        crowd.idle_sockets = crowd.fleet.connected
        crowd.setup = {
            "watchers": opts.watchers,
            "processes": len(crowd.fleet.procs),
            "connected": crowd.fleet.connected,
            "failed": dict(failed),
            "setup_s": round(time.monotonic() - began, 1),
            "create_s": max(float(r["create_s"]) for r in crowd.fleet.ready),
            "connect_s": max(float(r["connect_s"]) for r in crowd.fleet.ready),
            "loop": crowd.fleet.ready[0]["loop"],
        }
        if progress is not None:
            progress.console.print(
                f"{crowd.fleet.connected:,} of {opts.watchers:,} watchers connected in "
                f"{len(crowd.fleet.procs)} process(es) in {crowd.setup['setup_s']} s "
                f"(sign-up {crowd.setup['create_s']} s, sockets {crowd.setup['connect_s']} s)"
                + (f"; failed: {dict(failed)}" if failed else "")
            )
        return crowd

    def figures(self, marks: list[list[dict[str, Any]]], rss_loaded_kb: int) -> dict[str, Any]:
        out = watcher_figures(marks)
        per = max(1, self.idle_sockets)
        loaded = max(1, out["open_at_load_end"])
        out["setup"] = self.setup
        out["web_rss"] = {
            "web_processes": self.web_processes,
            "before_kb": self.rss_before_kb,
            "idle_kb": self.rss_idle_kb,
            "load_end_kb": rss_loaded_kb,
            "idle_sockets": self.idle_sockets,
            # (web RSS with the watchers' sockets open - before they connected) / sockets
            "idle_kb_per_socket": round((self.rss_idle_kb - self.rss_before_kb) / per, 2),
            "load_end_kb_per_socket": round((rss_loaded_kb - self.rss_before_kb) / loaded, 2),
        }
        return out


async def measure(
    opts: Options,
    start: Callable[[], Up],
    stop: Callable[[Up], None],
    extra_roots: Callable[[], Mapping[str, int | list[int]]] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Every rate of ``opts`` on ``up``s from ``start``: a fresh one at first, after a
    rate that did not drain, and for every rate with ``fresh_each_rate``. With
    ``opts.watchers`` a crowd of read-only sockets joins each ``up`` before its first
    window. The core of the benchmark, also run by tests/load/test_bench_game.py."""
    rows: list[dict[str, Any]] = []
    up: Up | None = None
    client: GameClient | None = None
    crowd: Crowd | None = None
    up_rows: list[dict[str, Any]] = []  # the rows measured on the current up

    async def dismiss_crowd() -> None:
        nonlocal crowd
        if crowd is None:
            return
        fleet, crowd = crowd.fleet, None
        closed = await fleet.close()
        if up_rows and "watchers" in up_rows[-1]:
            up_rows[-1]["watchers"]["end_close"] = closed
        if progress is not None:
            progress.console.print(
                f"watchers closed: {closed['clean']:,} of {closed['closing']:,} cleanly "
                f"(1000 both ways), {closed['aborted']:,} aborted"
            )

    try:
        for i, rate in enumerate(opts.rates):
            if up is None or (opts.fresh_each_rate and i) or not rows[-1]["drained"]:
                await dismiss_crowd()
                if client is not None:
                    await client.close()
                if up is not None:
                    stop(up)
                up_rows = []
                began = time.monotonic()
                up = start()
                ready = time.monotonic()
                client = await GameClient(up.base, opts.players, opts.seed, up.admin_token).start()
                if progress is not None:
                    progress.console.print(
                        f"a fresh up was ready in {ready - began:.1f} s; {opts.players} players "
                        f"and their sockets in {time.monotonic() - ready:.1f} s"
                    )
                if opts.watchers > 0:
                    crowd = await Crowd.start(up, client, opts, progress)
                if opts.warmup > 0:
                    await client.offer(min(50.0, rate), opts.warmup, opts, opts.drain)
            assert client is not None and up is not None
            roots: dict[str, int | list[int]] = dict(extra_roots() if extra_roots else {})
            if crowd is not None:
                roots["watchers"] = crowd.fleet.pids
            probe = Processes(up.proc.pid if up.proc else 0, roots)
            snap: list[CpuSnapshot] = []
            rss: list[int] = []
            task = None
            if progress is not None:
                task = progress.add_task(f"{rate:g}/s", total=None, info="")

            def tick(w: Window, sent: int, task: Any = task) -> None:
                assert progress is not None
                progress.update(
                    task,
                    completed=sent,
                    total=w.planned,
                    info=f"202 {w.accepted:,}  scored {w.scored:,}  pipelined {w.pipelined:,}",
                )
                progress.refresh()  # from the loop: a refresh thread would take the GIL mid-send

            def snapshot(
                probe: Processes = probe,
                snap: list[CpuSnapshot] = snap,
                rss: list[int] = rss,
                crowd: Crowd | None = crowd,
            ) -> None:
                if crowd is not None:
                    crowd.fleet.mark()  # one line to each watcher process: it stamps itself
                snap.append(probe.snapshot())
                rss.append(web_rss_kb(snap[-1].roles)[0])

            w = await client.offer(
                rate,
                opts.duration,
                opts,
                opts.drain,
                on_tick=tick if progress is not None else None,
                probe=snapshot,
            )
            if progress is not None:
                tick(w, len(w.guesses))
            before, loaded, after = snap
            row = window_figures(w, cpu_figures(before, loaded, after, w.accepted), client)
            if crowd is not None:
                row["watchers"] = crowd.figures(await crowd.fleet.report(), rss[1])
            rows.append(row)
            up_rows.append(row)
    finally:
        try:
            await dismiss_crowd()
        finally:
            if client is not None:
                await client.close()
            if up is not None:
                stop(up)
    return rows


async def run(
    a: argparse.Namespace,
    opts: Options,
    tmp: Path,
    title: str,
    server_root: Path | None = None,
    web_processes: int | None = None,
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Every rate of ``opts`` on ``up``s with ``--web-processes web_processes`` and ``env``
    (default: ``up_env(opts)``)."""
    with database(a) as (next_url, roots):

        def start() -> Up:
            args = up_args(a, web_processes)
            url = next_url()
            if url:
                args += ["--database-url", url]
            n = len(list(tmp.glob("data-*")))
            return start_up(
                tmp / f"data-{n}", *args, env=up_env(opts) if env is None else env, root=server_root
            )

        def stop(up: Up) -> None:
            try:
                up.stop()
            except AssertionError as e:
                console.print(f"[yellow]up did not stop cleanly: {str(e).splitlines()[0]}")
            finally:
                up.kill_everything()

        progress = None
        if opts.progress:
            progress = Progress(
                TextColumn("{task.description:>8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=console,
                auto_refresh=False,
            )
        with progress or contextlib.nullcontext():
            return await measure(opts, start, stop, roots, progress)
