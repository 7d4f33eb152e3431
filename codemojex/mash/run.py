"""One mash run, start to verdict, bounded in time from end to end.

1. set-up: create the players, open one socket each and wait for every greeting (from then
   on no score can miss its socket);
2. load: honest players and mashers play for ``duration`` seconds; chaos kills, the queue is
   sampled;
3. wind-down: submissions stop; a request already sent is finished, so its ``202`` is booked;
4. drain: wait (at most ``drain_timeout``) until every accepted guess's score has arrived;
5. verdict (:mod:`codemojex.mash.verdict`), then the sockets and the HTTP pool are closed.

The hard deadline is the sum of those bounds; past it the run fails with ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from codemojex.mash.api import GameApi
from codemojex.mash.chaos import Kill, run_chaos, settle
from codemojex.mash.feed import Feed
from codemojex.mash.ledger import KINDS, Ledger, percentile
from codemojex.mash.monitor import QueueSample, watch_queue
from codemojex.mash.options import MashOptions, masher_address
from codemojex.mash.players import Field, Player, play_honest, play_masher
from codemojex.mash.progress import ProgressView
from codemojex.mash.verdict import Verdict, judge

SETUP_TIMEOUT_S = 60.0
WIND_DOWN_S = 15.0  # a submission in flight, with its retries, finishes within this
VERIFY_TIMEOUT_S = 120.0
SIGNUP_CONCURRENCY = 16
SHARED_CONNECTIONS = 40  # set-up, admin calls and the verdict's GETs (32 at a time)
DRAIN_POLL_S = 0.1


@dataclass(slots=True)
class MashResult:
    options: MashOptions
    verdict: Verdict
    ledger: Ledger
    kills: list[Kill]
    queue: list[QueueSample]
    started_at: str
    load_s: float  # how long submissions actually ran
    drain_s: float  # from the end of the load until the last score arrived (or the timeout)
    sockets: dict[str, int] = field(default_factory=dict)
    load_started_at: float = 0.0  # the load's start, seconds since the epoch

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.ok else 1

    def classes(self) -> list[dict[str, Any]]:
        out = []
        led = self.ledger
        for kind in KINDS:
            lat = led.latencies(kind)
            sent = led.submitted[kind]
            clicks = led.click_to_score(kind)
            answers = led.answer_times(kind)
            out.append(
                {
                    "class": kind,
                    "submitted": sent,
                    "accepted": led.by_kind[kind],
                    "accepted_share": round(led.by_kind[kind] / sent, 4) if sent else None,
                    "scored": len(lat),
                    "refused_429": led.refused[kind],
                    "rate_limited": led.rate_limited[kind],
                    "overloaded_503": led.overloaded[kind],
                    "round_closed": led.round_closed[kind],
                    "unknown": led.unknown[kind],
                    "statuses": {str(k): v for k, v in sorted(led.statuses[kind].items())},
                    "answer_p50_ms": _ms(percentile(answers, 50)),
                    "answer_p99_ms": _ms(percentile(answers, 99)),
                    "click_to_score_p50_ms": _ms(percentile(clicks, 50)),
                    "click_to_score_p99_ms": _ms(percentile(clicks, 99)),
                    "accepted_per_s": round(led.by_kind[kind] / self.load_s, 1),
                    "p50_ms": _ms(percentile(lat, 50)),
                    "p90_ms": _ms(percentile(lat, 90)),
                    "p99_ms": _ms(percentile(lat, 99)),
                    "max_ms": _ms(max(lat, default=None)),
                    "server_p50_ms": _ms(percentile(lags := led.server_lags(kind), 50)),
                    "server_p99_ms": _ms(percentile(lags, 99)),
                }
            )
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "accepted": self.ledger.accepted,
            "scored": self.ledger.scored,
            "accepted_per_s": round(self.ledger.accepted / self.load_s, 1),
            "load_s": round(self.load_s, 2),
            "load_started_at": round(self.load_started_at, 3),
            "drain_s": round(self.drain_s, 2),
            "classes": self.classes(),
            "sockets": self.sockets,
        }

    def as_dict(self) -> dict[str, Any]:
        """Everything measured, for ``results.json``."""
        return {
            "url": self.options.url,
            "started_at": self.started_at,
            "options": self.options.as_dict(),
            "verdict": self.verdict.as_dict(),
            "summary": self.summary(),
            "kills": [k.as_dict() for k in self.kills],
            "queue": [s.as_dict() for s in self.queue],
            "guesses": [
                {
                    "job_id": g.job_id,
                    "player_id": g.player_id,
                    "kind": g.kind,
                    "round_id": g.round_id,
                    "seq": g.seq,
                    "accepted_at": round(g.accepted_at, 4),
                    "scored_at": None if g.scored_at is None else round(g.scored_at, 4),
                    "latency": None if g.latency is None else round(g.latency, 4),
                    "server_lag": None if g.server_lag is None else round(g.server_lag, 4),
                    "score_messages": g.messages,
                }
                for g in self.ledger.rows()
            ],
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def _signup(
    api: GameApi, options: MashOptions, masher_apis: dict[int, GameApi]
) -> list[Player]:
    """Every player, each masher from its own source address (so the server charges its
    new-player bucket there, as it would a real client's)."""
    tag = secrets.token_hex(3)  # tells this run's players from earlier runs' on the board
    gate = asyncio.Semaphore(SIGNUP_CONCURRENCY)

    async def one(kind: str, i: int) -> Player:
        async with gate:
            name = f"{options.name_prefix[:16]}-{tag}-{kind[0]}{i}"
            if kind == "honest":
                p = await api.create_player(name)
                return Player(p.player_id, p.name, p.token, "honest")
            own = masher_apis[i]
            p = await own.create_player(name)
            return Player(p.player_id, p.name, p.token, "masher", own.local_address)

    return list(
        await asyncio.gather(
            *(one("honest", i) for i in range(options.players)),
            *(one("masher", i) for i in range(options.mashers)),
        )
    )


class _Run:
    """The moving parts of one run, so that every task is cancelled however it ends."""

    def __init__(self, options: MashOptions) -> None:
        self.options = options
        self.api = GameApi(options.url, connections=SHARED_CONNECTIONS)
        # One connection per player, in a client of its own: a player has one request in
        # flight at a time, and httpx's pool costs CPU in proportion to the connections
        # it holds times the requests waiting for one, which a shared pool makes large.
        self.player_apis: dict[str, GameApi] = {}
        self.ledger = Ledger()
        self.stop = asyncio.Event()
        self.kills: list[Kill] = []
        self.samples: list[QueueSample] = []
        self.phase = "set-up"
        self.load_started_at = 0.0  # the load's start, on the wall clock (other tools align)
        self.background: list[asyncio.Task[None]] = []
        self.feeds: list[Feed] = []
        self.masher_apis: list[GameApi] = []  # one each, built before sign-up

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self.background.append(task)
        return task

    async def close(self) -> None:
        # Players, chaos, samples and progress (which prints the last state) first, one by
        # one; then every socket at once, each close handshake bounded by its own timeout.
        feeds = len(self.feeds)
        for task in reversed(self.background[feeds:]):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for task in self.background[:feeds]:
            task.cancel()
        await asyncio.gather(*self.background[:feeds], return_exceptions=True)
        clients = {id(a): a for a in (*self.player_apis.values(), *self.masher_apis, self.api)}
        await asyncio.gather(*(api.aclose() for api in clients.values()))

    async def execute(self) -> MashResult:
        opts, led = self.options, self.ledger
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        async with asyncio.timeout(SETUP_TIMEOUT_S):
            field_ = Field(await self.api.current_round())
            masher_apis = {
                i: GameApi(
                    opts.url,
                    connections=opts.masher_in_flight,
                    local_address=masher_address(i, opts.masher_addresses),
                )
                for i in range(opts.mashers)
            }
            self.masher_apis = list(masher_apis.values())
            players = await _signup(self.api, opts, masher_apis)
            self.feeds = [Feed(self.api.ws_url, p, led, field_) for p in players]
            for feed in self.feeds:
                self.spawn(feed.run(), f"feed-{feed.player.name}")
            await asyncio.gather(*(f.ready.wait() for f in self.feeds))
        led.restart_clock()
        self.phase = "load"
        if opts.progress:
            view = ProgressView(led, lambda: self.phase, lambda: len(self.kills))
            self.spawn(view.run(), "progress")
        if opts.admin_token:
            self.spawn(watch_queue(self.api, opts.admin_token, led, self.samples), "queue")
        if opts.chaos_kill_every:
            assert opts.admin_token
            self.spawn(
                run_chaos(
                    self.api, opts.admin_token, opts.chaos_kill_every, led, self.kills, self.stop
                ),
                "chaos",
            )
        master = random.Random(opts.seed)
        playing = []
        mashers = iter(self.masher_apis)
        self.load_started_at = time.time()
        for p in players:
            rng = random.Random(master.getrandbits(64))
            if p.kind == "honest":
                api = self.player_apis[p.player_id] = GameApi(opts.url, connections=1)
                coro = play_honest(p, api, led, field_, self.stop, rng, opts.think_s)
            else:
                api = self.player_apis[p.player_id] = next(mashers)
                coro = play_masher(
                    p, api, led, field_, self.stop, rng, opts.masher_rate, opts.masher_in_flight
                )
            playing.append(self.spawn(coro, f"play-{p.name}"))

        await asyncio.sleep(opts.duration)
        self.phase = "winding down"
        self.stop.set()
        load_s = led.now()
        await asyncio.wait(playing, timeout=WIND_DOWN_S)

        self.phase = "draining"
        end = time.monotonic() + opts.drain_timeout
        while led.in_flight and time.monotonic() < end:
            await asyncio.sleep(DRAIN_POLL_S)
        drain_s = led.now() - load_s

        self.phase = "verifying"
        async with asyncio.timeout(VERIFY_TIMEOUT_S):
            if opts.admin_token:
                self.kills[:] = await settle(self.api, opts.admin_token, self.kills)
            verdict = await judge(
                self.api, self.player_apis, led, {p.player_id: p for p in players}, self.kills
            )
        sockets = {
            "opened": sum(f.connects for f in self.feeds),
            "players": len(self.feeds),
            "gaps": len(led.gaps),
            "unsolicited_scores": led.unsolicited,
        }
        return MashResult(
            opts,
            verdict,
            led,
            self.kills,
            self.samples,
            started_at,
            load_s,
            drain_s,
            sockets,
            self.load_started_at,
        )


async def run(options: MashOptions) -> MashResult:
    """One run; raises ``TimeoutError`` past the hard deadline (set-up + load + wind-down +
    drain + verdict bounds)."""
    deadline = (
        SETUP_TIMEOUT_S + options.duration + WIND_DOWN_S + options.drain_timeout + VERIFY_TIMEOUT_S
    )
    state = _Run(options)
    try:
        async with asyncio.timeout(deadline):
            result = await state.execute()
    finally:
        await state.close()
    if options.report is not None:
        from codemojex.mash.report import write_report

        write_report(result.as_dict(), options.report)
    return result
