"""A resuming socket's replay: its player's retained scores after ``after=``, within
allowances charged across connections (docs/contract.md §4 "Overload").

A resume point (``event_id``, sent back as ``after=``) is an id of one events stream. On a
partitioned queue every partition has its own stream and ids, but a player's guesses all
live on one partition (their lane's), so their scores all come from that partition's
stream: the id is a position in it, and replay and gap checks read that stream alone.
"""

from __future__ import annotations

import math

from codemojex.game import Game
from web.allowance import Allowances
from web.messages import score_message
from web.outbox import Outgoing

REPLAY_PAGE = 1_000


class Replays:
    def __init__(self, game: Game) -> None:
        self.game = game
        cfg = game.config
        # Three full windows a minute per player (a page that resumes too far back is
        # charged the window it was refused), ten per address.
        per_player = 3 * cfg.replay_max_events
        self._events = Allowances(per_player, per_player)
        self._events_by_address = Allowances(10 * per_player / 3, 10 * per_player / 3)
        self._replays_by_address = Allowances(cfg.replays_per_minute, cfg.replays_per_minute)

    async def gap_after(self, player_id: str, after: tuple[int, int]) -> bool:
        """True when events after ``after`` may have been trimmed already from the stream
        of ``player_id``'s scores (their partition's)."""
        return await self.game.queue_of(player_id).events.trimmed_after(f"{after[0]}-{after[1]}")

    async def resume(self, player_id: str, address: str, after: str) -> list[Outgoing] | None:
        """A resuming socket's replay, if its player and address can still afford one:
        None (the socket gets a gap, and the page refetches over HTTP) when either has
        spent its allowance, or when the window is longer than what is left of it."""
        budgets = ((self._events, player_id), (self._events_by_address, address))
        left = min(b.available(k) for b, k in budgets)
        if left <= 0 or self._replays_by_address.available(address) < 1:
            return None
        self._replays_by_address.spend(address, 1)
        bounds = [x for x in (left, self.game.config.replay_max_events or math.inf) if x < math.inf]
        budget = int(min(bounds)) if bounds else None
        replay, read = await self.replay(player_id, after, budget)
        for bucket, key in budgets:
            bucket.spend(key, read)
        return replay

    async def replay(
        self, player_id: str, after: str, budget: int | None = None
    ) -> tuple[list[Outgoing] | None, int]:
        """This player's retained scores after ``after``, oldest first, and the events
        read; None when that means reading more than ``budget`` events (a gap)."""
        out: list[Outgoing] = []
        queue = self.game.queue_of(player_id)  # every score of theirs is in its stream
        cursor = after
        read = 0
        while True:
            page = REPLAY_PAGE if budget is None else min(REPLAY_PAGE, budget - read + 1)
            events = await queue.events.since(cursor, count=page)
            read += len(events)
            if budget is not None and read > budget:
                return None, read
            for event in events:
                msg = score_message(event)
                if msg is not None and msg["player_id"] == player_id:
                    out.append(Outgoing.of(msg, event.job_id))
            if len(events) < page:
                return out, read
            cursor = events[-1].event_id
