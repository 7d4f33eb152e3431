"""Admitting a guess costs one Valkey round trip, and a refused one leaves nothing behind.

The deadline, the idempotency key, the per-player rate and the pending cap are all judged
inside the one enqueue script: counted here with MONITOR on the real server, so a second
command (a pipeline, a read of the key, a write of the seq) shows up as one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio

from codemojex import errors
from codemojex.config import Config
from codemojex.game import Game
from codemojex.rules import DEFAULT_PALETTE

GUESS = list(DEFAULT_PALETTE[:4])
OTHER = list(DEFAULT_PALETTE[4:8])


@asynccontextmanager
async def game_with(config: Config, **changes: Any) -> AsyncIterator[Game]:
    g = Game.connect(config.with_(**changes))
    await g.conn.flushall()  # a private server: nothing else lives here
    try:
        yield g
    finally:
        await g.close()


async def client_commands(url: str, action: Callable[[], Awaitable[Any]]) -> list[str]:
    """The commands clients sent to the server while ``action`` ran (commands that scripts
    ran are left out): MONITOR, fenced by two ECHO markers from a connection of our own."""
    marker = uuid.uuid4().hex
    monitor_conn = redis.asyncio.Redis.from_url(url)
    probe = redis.asyncio.Redis.from_url(url)
    seen: list[str] = []
    try:
        async with monitor_conn.monitor() as m:
            await probe.echo(f"start-{marker}")
            async with asyncio.timeout(10):
                while f"start-{marker}" not in (await m.next_command())["command"]:
                    pass
                await action()
                await probe.echo(f"end-{marker}")
                while True:
                    info = await m.next_command()
                    if f"end-{marker}" in info["command"]:
                        break
                    if info["client_type"] != "lua":
                        seen.append(info["command"].split(" ", 1)[0].upper())
    finally:
        await monitor_conn.aclose()
        await probe.aclose()
    return seen


async def dedup_keys(game: Game) -> list[bytes]:
    return [k async for k in game.conn.scan_iter(match=f"{game.queue.keys.prefix}dedup:*")] + [
        k async for k in game.conn.scan_iter(match="cmx:idem:*")
    ]


async def test_an_accepted_guess_costs_one_round_trip(config: Config) -> None:
    async with game_with(config) as game:
        player = (await game.create_player("Ada")).player_id
        rnd, _ = await game.current_round()
        await game.submit(player, rnd.round_id, GUESS)  # the round is cached from here on
        accepted: list[Any] = []

        def submit(key: str | None) -> Callable[[], Awaitable[Any]]:
            async def go() -> None:
                accepted.append(await game.submit(player, rnd.round_id, GUESS, key))

            return go

        assert await client_commands(game.config.valkey_url or "", submit(None)) == ["EVALSHA"]
        assert await client_commands(game.config.valkey_url or "", submit("k-1")) == ["EVALSHA"]
        # the replay too: one round trip, the same receipt
        assert await client_commands(game.config.valkey_url or "", submit("k-1")) == ["EVALSHA"]
        assert [(a.seq, a.created) for a in accepted] == [(1, True), (2, True), (2, False)]
        assert accepted[1].job_id == accepted[2].job_id


async def _seq_counters(game: Game) -> list[int]:
    return sorted(
        [
            int(await game.conn.get(k) or 0)
            async for k in game.conn.scan_iter(match=f"{game.queue.keys.prefix}seq:*")
        ]
    )


async def test_refused_guesses_leave_no_key_and_take_no_seq(config: Config) -> None:
    async with game_with(config, lane_cap=2, guess_rate=0, round_seconds=1) as game:
        player = (await game.create_player("Full")).player_id
        rnd, _ = await game.current_round()
        for _ in range(2):
            await game.submit(player, rnd.round_id, GUESS)
        for i in range(50):
            with pytest.raises(errors.LaneFull):
                await game.submit(player, rnd.round_id, GUESS, f"full-{i}")
        while await game.queue.server_time_ms() < rnd.closes_at_ms:
            await asyncio.sleep(0.05)
        for i in range(50):
            with pytest.raises(errors.RoundClosed):
                await game.submit(player, rnd.round_id, GUESS, f"late-{i}")
        assert await dedup_keys(game) == []
        assert await _seq_counters(game) == [2]  # no number taken by a refusal
    async with game_with(config, guess_rate=0.01, guess_burst=3) as game:
        player = (await game.create_player("Fast")).player_id
        rnd, _ = await game.current_round()
        for _ in range(3):
            await game.submit(player, rnd.round_id, GUESS)
        for i in range(50):
            with pytest.raises(errors.RateLimited) as err:
                await game.submit(player, rnd.round_id, GUESS, f"fast-{i}")
        assert err.value.retry_after_s >= 1
        assert err.value.headers() == {"Retry-After": str(err.value.retry_after_s)}
        assert "fast-" not in err.value.detail  # the detail never echoes the input
        assert await dedup_keys(game) == []
        assert await _seq_counters(game) == [3]


async def test_a_replay_after_the_close_answers_the_same_job_and_seq(config: Config) -> None:
    async with game_with(config, round_seconds=1) as game:
        player = (await game.create_player("Ada")).player_id
        rnd, _ = await game.current_round()
        await game.submit(player, rnd.round_id, OTHER)
        first = await game.submit(player, rnd.round_id, GUESS, "once")
        assert (first.seq, first.created) == (1, True)
        while await game.queue.server_time_ms() < rnd.closes_at_ms:
            await asyncio.sleep(0.05)
        again = await game.submit(player, rnd.round_id, GUESS, "once")
        assert (again.job_id, again.seq, again.created) == (first.job_id, 1, False)
        with pytest.raises(errors.IdempotencyConflict):  # 409 before anything else
            await game.submit(player, rnd.round_id, OTHER, "once")
        with pytest.raises(errors.RoundClosed):
            await game.submit(player, rnd.round_id, GUESS, "never")
        assert len(await dedup_keys(game)) == 1  # "once" only: the refused key was not bound


async def test_a_key_reused_with_another_body_is_a_conflict(config: Config) -> None:
    async with game_with(config) as game:
        player, other = [(await game.create_player(n)).player_id for n in ("Ada", "Bob")]
        rnd, _ = await game.current_round()
        first = await game.submit(player, rnd.round_id, GUESS, "k")
        with pytest.raises(errors.IdempotencyConflict):
            await game.submit(player, rnd.round_id, OTHER, "k")
        # keys are per player: the same key from someone else is a guess of their own
        theirs = await game.submit(other, rnd.round_id, OTHER, "k")
        assert theirs.created and theirs.job_id != first.job_id
        assert (await game.submit(player, rnd.round_id, OTHER)).seq == 1


async def test_the_rate_limit_bursts_then_refills_and_zero_is_off(config: Config) -> None:
    async with game_with(config, guess_rate=20, guess_burst=5) as game:
        player = (await game.create_player("Fast")).player_id
        rnd, _ = await game.current_round()
        for _ in range(5):
            await game.submit(player, rnd.round_id, GUESS)
        with pytest.raises(errors.RateLimited) as err:
            await game.submit(player, rnd.round_id, GUESS)
        assert err.value.retry_after_s == 1  # 50 ms, in whole seconds: at least 1
        await asyncio.sleep(0.06)  # one token back on the server clock
        assert (await game.submit(player, rnd.round_id, GUESS)).seq == 5
    async with game_with(config, guess_rate=0) as game:
        player = (await game.create_player("Free")).player_id
        rnd, _ = await game.current_round()
        for i in range(60):
            assert (await game.submit(player, rnd.round_id, GUESS)).seq == i


async def test_honest_pace_never_meets_the_default_limit(config: Config) -> None:
    async with game_with(config) as game:
        assert (game.config.guess_rate, game.config.guess_burst) == (10, 20)  # the defaults
        player = (await game.create_player("Honest")).player_id
        rnd, _ = await game.current_round()
        # even after a burst (a page re-sending what it queued while offline) ...
        for i in range(20):
            assert (await game.submit(player, rnd.round_id, GUESS)).seq == i
        for i in range(20, 26):  # ... a guess every 0.5 s is always admitted
            await asyncio.sleep(0.5)
            assert (await game.submit(player, rnd.round_id, GUESS)).seq == i


async def test_fifo_keeps_the_pending_cap_and_the_rate_per_player(config: Config) -> None:
    async with game_with(config, fifo=True, lane_cap=2, guess_rate=0.01, guess_burst=3) as game:
        a, b = [(await game.create_player(n)).player_id for n in ("A", "B")]
        rnd, _ = await game.current_round()
        for _ in range(2):
            await game.submit(a, rnd.round_id, GUESS)
        with pytest.raises(errors.LaneFull):
            await game.submit(a, rnd.round_id, GUESS)
        # B shares the one FIFO lane but has a cap of its own, then a rate of its own
        assert [(await game.submit(b, rnd.round_id, GUESS)).seq for _ in range(2)] == [0, 1]
        claim = await game.queue.lanes.claim("WRK_t", 60_000)
        assert claim is not None and claim.lane == "fifo"
        await game.queue.jobs.complete(claim.job_id, claim.token)  # A's first: A has room
        assert (await game.submit(a, rnd.round_id, GUESS)).seq == 2
        with pytest.raises(errors.RateLimited):  # A's bucket (3) is empty now
            await game.submit(a, rnd.round_id, GUESS)
        assert await game.queue.lanes.load(a) == 2 and await game.queue.lanes.load(b) == 2
