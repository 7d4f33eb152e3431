"""Live progress with rich: accepted, scored, in flight, refused, latency per class, kills.

On a terminal it is a table redrawn twice a second; anywhere else (a pipe, a CI log) one
plain line every few seconds, so logs stay readable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from codemojex.mash.ledger import KINDS, Ledger, percentile

REFRESH_S = 0.5
PLAIN_EVERY_S = 5.0
WINDOW_S = 10.0  # the "now" latency columns cover the last this many seconds


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"


class ProgressView:
    def __init__(
        self,
        ledger: Ledger,
        phase: Callable[[], str],
        kills: Callable[[], int],
        console: Console | None = None,
    ) -> None:
        self.ledger = ledger
        self.phase = phase
        self.kills = kills
        self.console = console or Console(stderr=True)

    def table(self) -> Table:
        led = self.ledger
        now = led.now()
        t = Table(title=f"codemojex mash — {self.phase()} — {now:,.0f} s", title_justify="left")
        for col in (
            "class",
            "accepted",
            "scored",
            "in flight",
            "refused 429",
            "503 overloaded",
            "round closed",
            "p50 ms",
            "p99 ms",
            f"p99 last {WINDOW_S:.0f}s",
        ):
            t.add_column(col, justify="right" if col != "class" else "left")
        for kind in KINDS:
            lat = led.latencies(kind)
            scored = len(lat)
            t.add_row(
                kind,
                f"{led.by_kind[kind]:,}",
                f"{scored:,}",
                f"{led.by_kind[kind] - scored:,}",
                f"{led.refused[kind]:,}",
                f"{led.overloaded[kind]:,}",
                f"{led.round_closed[kind]:,}",
                _ms(percentile(lat, 50)),
                _ms(percentile(lat, 99)),
                _ms(percentile(led.latencies(kind, now - WINDOW_S), 99)),
            )
        t.caption = (
            f"accepted {led.accepted:,} · scored {led.scored:,} · in flight "
            f"{led.in_flight:,} · refused {sum(led.refused.values()):,} · kills "
            f"{self.kills()}"
        )
        return t

    def line(self) -> str:
        led = self.ledger
        parts = [
            f"[{led.now():6.1f}s {self.phase()}] accepted {led.accepted}",
            f"scored {led.scored}",
            f"in flight {led.in_flight}",
            f"refused {sum(led.refused.values())}",
            f"overloaded {sum(led.overloaded.values())}",
            f"kills {self.kills()}",
        ]
        for kind in KINDS:
            lat = led.latencies(kind)
            parts.append(f"{kind} p50/p99 {_ms(percentile(lat, 50))}/{_ms(percentile(lat, 99))} ms")
        return ", ".join(parts)

    async def run(self) -> None:
        """Until cancelled; the last state is drawn once more on the way out."""
        if not self.console.is_terminal:
            await self._plain()
            return
        with Live(self.table(), console=self.console, auto_refresh=False) as live:
            try:
                while True:
                    await asyncio.sleep(REFRESH_S)
                    live.update(self.table(), refresh=True)
            finally:
                live.update(self.table(), refresh=True)

    async def _plain(self) -> None:
        try:
            while True:
                await asyncio.sleep(PLAIN_EVERY_S)
                self.console.print(self.line(), highlight=False, soft_wrap=True)
        finally:
            self.console.print(self.line(), highlight=False, soft_wrap=True)
