"""The two kinds of player the load script runs, and the round they all play.

* **Honest**: thinks 1–3 s, guesses a code consistent with every peg seen so far
  (:class:`~codemojex.mash.solver.Solver`), waits for that guess's score on its socket,
  and after a solve waits for the next round — a person at the keyboard.
* **Masher**: keeps ``--masher-in-flight`` random guesses in flight (closed loops, one
  connection each), back to back (or at ``--masher-rate`` per second in all), and never
  waits for a score; a ``429`` makes that loop sleep exactly ``Retry-After``, as a
  well-behaved client must, a ``503`` does not: it sends again at once — the load that
  finds out whether the server's door holds.

Both stop submitting when ``stop`` is set; a request already sent is finished, so every
``202`` the server gives reaches the ledger.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

from codemojex.mash.api import GameApi, Submitted
from codemojex.mash.ledger import Kind, Ledger
from codemojex.mash.solver import Solver

THINK_S = (1.0, 3.0)
# An honest player gives up waiting for a score after this and guesses on without it; the
# verdict still catches the guess if it never comes.
SCORE_WAIT_S = 30.0
ERROR_PAUSE_S = 0.5


@dataclass(frozen=True, slots=True)
class Player:
    player_id: str
    name: str
    token: str
    kind: Kind
    source: str | None = None  # the source address it sends from (None: the default)


class Field:
    """The round everyone is playing, as the sockets' ``round`` messages and the API tell it.

    Round ids are ULIDs, sortable by creation, so a late message about an older round can
    never take the field backwards.
    """

    def __init__(self, round_info: dict[str, Any]) -> None:
        self.round_id = str(round_info["round_id"])
        self.length = int(round_info["length"])
        self.palette: tuple[str, ...] = tuple(round_info["palette"])
        self.open = round_info.get("state", "open") == "open"
        self.rounds_seen = [self.round_id]
        self._changed = asyncio.Event()

    def observe(self, message: dict[str, Any]) -> None:
        """A ``round`` message (or ``GET /api/round``'s answer)."""
        round_id = str(message.get("round_id"))
        state = message.get("state")
        if state == "open" and round_id > self.round_id:
            self.round_id, self.open = round_id, True
            self.rounds_seen.append(round_id)
            self._changed.set()
            self._changed = asyncio.Event()
        elif state == "closed" and round_id == self.round_id:
            self.open = False

    async def refresh(self, api: GameApi) -> None:
        try:
            self.observe(await api.current_round())
        except Exception:  # noqa: BLE001 - the sockets will tell us soon enough
            await asyncio.sleep(ERROR_PAUSE_S)

    async def next_round(self, after: str, stop: asyncio.Event) -> None:
        """Until a round newer than ``after`` opens, or ``stop``."""
        while self.round_id <= after and not stop.is_set():
            await _first(self._changed.wait(), stop.wait())


async def _first(*aws: Any, timeout: float | None = None) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def pause(seconds: float, stop: asyncio.Event) -> bool:
    """Sleep ``seconds`` unless ``stop`` comes first; True when stopped."""
    if seconds > 0 and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            pass
    return stop.is_set()


async def _send(
    player: Player,
    api: GameApi,
    ledger: Ledger,
    field: Field,
    stop: asyncio.Event,
    round_id: str,
    guess: list[str],
    *,
    patient: bool = True,
) -> Submitted:
    """Submit ``guess``, book its outcome and do what a client must after a refusal."""
    sent_at = ledger.now()
    out = await api.submit(player.token, round_id, guess, patient=patient)
    ledger.submitted[player.kind] += 1
    ledger.statuses[player.kind].update(out.statuses)
    if out.outcome == "accepted":
        assert out.job_id is not None and out.seq is not None
        ledger.accept(out.job_id, player.player_id, player.kind, round_id, out.seq, guess, sent_at)
    elif out.outcome in ("lane_full", "rate_limited"):
        ledger.refused[player.kind] += 1
        if out.outcome == "rate_limited":
            ledger.rate_limited[player.kind] += 1
        await pause(out.retry_after_s, stop)  # honour Retry-After, exactly
    elif out.outcome == "round_closed":
        ledger.round_closed[player.kind] += 1
        await field.refresh(api)
    elif out.outcome == "overloaded":
        ledger.overloaded[player.kind] += 1  # a masher sends again at once; honest ones retried
    elif out.outcome == "unknown":
        ledger.unknown[player.kind] += 1
        await pause(ERROR_PAUSE_S, stop)
    else:
        ledger.errors[player.kind] += 1
        await pause(ERROR_PAUSE_S, stop)
    return out


async def play_honest(
    player: Player,
    api: GameApi,
    ledger: Ledger,
    field: Field,
    stop: asyncio.Event,
    rng: random.Random,
    think_s: tuple[float, float] = THINK_S,
) -> None:
    round_id = field.round_id
    solver = Solver(field.palette, field.length, rng)
    while not stop.is_set():
        if solver.solved:
            await field.next_round(round_id, stop)
        if field.round_id != round_id:
            round_id = field.round_id
            solver = Solver(field.palette, field.length, rng)
        if await pause(rng.uniform(*think_s), stop):
            return
        if field.round_id != round_id:
            continue  # the round turned while we thought: start afresh
        guess = solver.next_guess()
        out = await _send(player, api, ledger, field, stop, round_id, guess)
        if out.outcome != "accepted" or out.job_id is None:
            continue
        waiting = asyncio.ensure_future(ledger.wait_score(out.job_id, SCORE_WAIT_S))
        await _first(waiting, stop.wait())
        score = waiting.result() if waiting.done() and not waiting.cancelled() else None
        if score is not None and score.get("round_id") == round_id:
            solver.learn(guess, int(score["exact"]), int(score["near"]))


async def play_masher(
    player: Player,
    api: GameApi,
    ledger: Ledger,
    field: Field,
    stop: asyncio.Event,
    rng: random.Random,
    rate: float | None = None,
    in_flight: int = 1,
) -> None:
    """``in_flight`` closed loops (``api`` should hold as many connections), ``rate`` guesses
    a second between them all (None: as fast as answered)."""
    await asyncio.gather(
        *(
            _mash(player, api, ledger, field, stop, random.Random(rng.getrandbits(64)), rate, n)
            for n in [in_flight] * in_flight
        )
    )


async def _mash(
    player: Player,
    api: GameApi,
    ledger: Ledger,
    field: Field,
    stop: asyncio.Event,
    rng: random.Random,
    rate: float | None,
    loops: int,
) -> None:
    interval = loops / rate if rate else 0.0
    due = time.monotonic()
    while not stop.is_set():
        if interval:
            due = max(due + interval, time.monotonic() - interval)  # no catch-up bursts
            if await pause(due - time.monotonic(), stop):
                return
        round_id = field.round_id
        guess = [rng.choice(field.palette) for _ in range(field.length)]
        await _send(player, api, ledger, field, stop, round_id, guess, patient=False)
