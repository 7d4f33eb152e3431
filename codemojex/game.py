"""``Game``: the game's services over one Valkey connection and one SQL engine.

The web layer and the worker processes both build one; it holds no state of its own
beyond caches of immutable things (rounds).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

import echomq
from codemojex import layout, store
from codemojex.admission import TokenBuckets, address_key
from codemojex.config import GUESS_QUEUE, Config
from codemojex.errors import (
    JobNotFound,
    NotYourGuess,
    RoundNotFound,
    Unauthorized,
    Unavailable,
)
from codemojex.guesses import Accepted, Guesses, player_of
from codemojex.roster import worker_views
from codemojex.rounds import RoundInfo, Rounds
from codemojex.rules import validate_name
from codemojex.views import GuessView, RoundView, Standing, WorkerView
from echomq.connection import Client

log = logging.getLogger("codemojex.game")

# Players known by their token's hash, per process. A player row never changes or goes
# away, so a hit can never be stale; only hits are kept (a wrong token costs a query, and
# guessing tokens fills nothing). Bounded: the least recently used entries leave first.
AUTH_CACHE_SIZE = 100_000
# A player's unscored guesses listed at most (the pending cap keeps them far fewer).
UNFINISHED_LISTED = 1_000
# Valkey connections of one process beyond its door's bound (web.door): the hub's
# reads, websocket greetings and replays (not behind the door), admin and metrics.
POOL_RESERVE = 64
DEFAULT_POOL = 100  # redis-py's own default, for a process without a door (a worker)
# A command that finds every connection busy waits this long for one (then 503).
POOL_TIMEOUT_S = 5.0


def pool_size(config: Config) -> int:
    """Valkey connections of one process: its door's bound plus :data:`POOL_RESERVE`."""
    return max(DEFAULT_POOL, config.door_in_flight + POOL_RESERVE)


@dataclass(frozen=True, slots=True)
class NewPlayer:
    player_id: str
    name: str
    token: str  # shown once; only its hash is stored


class Game:
    def __init__(self, conn: Client, engine: AsyncEngine, config: Config) -> None:
        self.conn = conn
        self.engine = engine
        self.config = config
        replicated = config.durability == "replicated"
        # The guesses queue, over config.partitions slots (one: the plain "guesses" queue).
        self.queues = echomq.Partitioned(
            conn,
            GUESS_QUEUE,
            config.partitions,
            echomq.Settings(replicas=1, replica_timeout_ms=config.replica_timeout_ms)
            if replicated
            else None,
        )
        self.rounds = Rounds(conn, engine, config)
        self.guesses = Guesses(self.queues, self.rounds, config)
        self._layout_agreed = False
        self._players: OrderedDict[str, store.Player] = OrderedDict()
        limits = self.guesses.limits
        self.new_players = TokenBuckets(
            conn,
            "players",
            limits.player_rate,
            limits.player_burst,
            "too many new players from this address; try again later",
        )

    @classmethod
    def connect(cls, config: Config) -> Game:
        """The game over a pool sized above what the door lets in, that waits for a free
        connection rather than failing: a pool that raises at once when full turns every
        request of a busy web process into a 503."""
        assert config.valkey_url, "valkey_url is required"
        conn = echomq.connect(
            config.valkey_url,
            socket_timeout=5,
            socket_connect_timeout=2,
            health_check_interval=10,
            max_connections=pool_size(config),
            pool_timeout=POOL_TIMEOUT_S,
        )
        return cls(conn, store.make_engine(config.sql_url), config)

    @property
    def queue(self) -> echomq.Queue:
        """The guesses queue of an unpartitioned game (tools and tests reach into it);
        a partitioned game has no one queue: use :attr:`queues`."""
        if len(self.queues) != 1:
            raise RuntimeError(
                f"the guesses queue has {len(self.queues)} partitions: use Game.queues"
            )
        return self.queues.partitions[0]

    def queue_of(self, player_id: str) -> echomq.Queue:
        """The partition holding ``player_id``'s guesses (all on one lane, or on FIFO's)."""
        return self.queues.of_lane(self.guesses.lane_of(player_id))

    async def agree_on_layout(self) -> None:
        """Check (once per process) that this process and the game agree on the queue's
        partitions (:mod:`codemojex.layout`); :class:`~codemojex.layout.LayoutMismatch`
        otherwise."""
        if not self._layout_agreed:
            await layout.agree(self.conn, len(self.queues))
            self._layout_agreed = True

    async def close(self) -> None:
        await self.conn.aclose()
        await self.engine.dispose()

    # -- players -------------------------------------------------------------

    async def create_player(self, name: object, address: str | None = None) -> NewPlayer:
        """A new player named ``name``; ``address`` (the client's) spends one token of its
        bucket, after the name was judged (400 before 429, as the contract orders)."""
        clean = validate_name(name)
        if address is not None:
            await self.new_players.take(address_key(address))  # an IPv6 /64 is one address
        token = secrets.token_urlsafe(24)
        player = await store.create_player(
            self.engine, clean, store.hash_token(token), await self.queues.server_time_ms()
        )
        return NewPlayer(player.player_id, player.name, token)

    def known_player(self, token: str | None) -> store.Player | None:
        """The player owning ``token`` if this process has seen it, else None; no I/O."""
        if not token or len(token) > 256:
            return None
        return self._players.get(store.hash_token(token))

    async def authenticate(self, token: str | None) -> store.Player:
        """The player owning ``token``; :class:`Unauthorized` otherwise. Only hashes are
        stored and compared, in constant time."""
        if not token or len(token) > 256:
            raise Unauthorized("a valid player token is required")
        wanted = store.hash_token(token)
        player = self._players.get(wanted)
        if player is not None:
            self._players.move_to_end(wanted)
            return player
        player = await store.player_by_token_hash(self.engine, wanted)
        if player is None or not hmac.compare_digest(player.token_hash, wanted):
            raise Unauthorized("a valid player token is required")
        self._players[wanted] = player
        if len(self._players) > AUTH_CACHE_SIZE:
            self._players.popitem(last=False)
        return player

    # -- rounds ------------------------------------------------------------------

    async def current_round(self) -> tuple[RoundInfo, int]:
        """The current round (opening the first one if none exists) and server now."""
        info = await self.rounds.current()
        if info is None:
            info = await self.rounds.ensure()
        return info, await self.queues.server_time_ms()

    async def round_view(self, round_id: str) -> RoundView:
        info = await self.rounds.get(round_id)
        if info is None:
            raise RoundNotFound("no such round")
        now = await self.queues.server_time_ms()
        out = info.public(now)
        if out["state"] == "closed":
            out["solvers"] = await store.round_solvers(self.engine, round_id)
        return out

    # -- guesses -----------------------------------------------------------------

    async def submit(
        self, player_id: str, round_id: str, guess: object, idempotency_key: str | None = None
    ) -> Accepted:
        try:
            await self.agree_on_layout()  # a round trip the first time only
        except layout.LayoutMismatch as e:
            # A web process started beside a game of another layout (Valkey was down when
            # it started): it must not strand guesses where no worker looks.
            log.error("%s", e)
            raise Unavailable(
                "this server is misconfigured (queue partitions); try again later",
                retry_after_s=60,
            ) from None
        return await self.guesses.submit(player_id, round_id, guess, idempotency_key)

    async def guess_view(self, player_id: str, job_id: str) -> GuessView:
        """One of the player's own guesses, with EchoMQ's state and the score if any.

        SQL is read before Valkey: a score is committed before its job completes, so a
        score read first goes with a state at least as late as its claim (never a pending
        job shown with its score), and a job read as completed after no score was found
        has its score committed by then: read again."""
        score = await store.score_by_job(self.engine, job_id)
        info = await self.queue_of(player_id).jobs.get(job_id)
        if info is None and score is None and len(self.queues) > 1:
            # Not on the player's partition: another player's guess (403), or none (404).
            info = await self.queues.get(job_id)
        if score is None and info is not None and info.state == "completed":
            score = await store.score_by_job(self.engine, job_id)
        if info is None and score is None:
            raise JobNotFound("no such guess")
        owner = score.player_id if score else player_of(info.payload, info.lane)  # type: ignore[union-attr]
        if owner != player_id:
            raise NotYourGuess("that guess belongs to another player")
        return _guess_view(job_id, info, score)

    async def guesses_of(self, player_id: str, round_id: str) -> list[GuessView]:
        """The player's guesses in a round: scored ones from SQL, unscored ones from Valkey.

        Valkey is read first: a job unfinished then and scored since is found in SQL
        after (its score wins); read the other way round, it could be in neither."""
        unfinished = await self._unfinished_of(player_id, round_id)
        scores = await store.scores_for(self.engine, player_id, round_id)
        out = []
        for s in scores:
            # Read before the score, a job still active goes with it (completing now);
            # one read as pending or scheduled was scored since, so that state is stale.
            info = unfinished.pop(s.job_id, None)
            out.append(_guess_view(s.job_id, info if info and info.state == "active" else None, s))
        out += [_guess_view(jid, info, None) for jid, info in unfinished.items()]
        return sorted(out, key=lambda g: -1 if g["seq"] is None else g["seq"])

    async def _unfinished_of(self, player_id: str, round_id: str) -> dict[str, echomq.JobInfo]:
        # The player is the load subject of its guesses in both lane modes (its own lane,
        # or the one "fifo" lane with the player as subject): one index, bounded by the
        # pending cap, instead of a walk over every active and scheduled job.
        return {
            info.job_id: info
            for info in await self.queue_of(player_id).lanes.unfinished(
                player_id, limit=UNFINISHED_LISTED
            )
            if info.state in ("pending", "active", "scheduled")
            and info.payload.get("round_id") == round_id
            and player_of(info.payload, info.lane) == player_id
        }

    async def leaderboard(self, round_id: str | None = None) -> list[Standing]:
        if round_id is not None and await self.rounds.get(round_id) is None:
            raise RoundNotFound("no such round")
        return await store.leaderboard(self.engine, round_id=round_id)

    # -- operations ----------------------------------------------------------------

    async def health(self) -> dict[str, bool]:
        out = {"valkey": False, "sql": False}
        try:
            out["valkey"] = bool(await self.conn.ping())
        except Exception as e:  # noqa: BLE001 - any failure means "not healthy"
            log.info("health: valkey unavailable: %s", e)
        try:
            await store.latest_round(self.engine)
            out["sql"] = True
        except Exception as e:  # noqa: BLE001
            log.info("health: sql unavailable: %s", e)
        return out

    async def workers(self) -> list[WorkerView]:
        """Every worker known recently: alive ones from the registry, dead ones with why."""
        return await worker_views(self.conn, self.queues)


def _guess_view(
    job_id: str, info: echomq.JobInfo | None, score: store.ScoreRecord | None
) -> GuessView:
    if score is not None:
        return {
            "job_id": job_id,
            "round_id": score.round_id,
            "seq": score.seq,
            "guess": list(score.guess),
            "state": info.state if info else "completed",
            "attempts": info.attempts if info else score.attempts,
            "score": {
                "exact": score.exact,
                "near": score.near,
                "solved": score.solved,
                "points": score.points,
            },
        }
    assert info is not None
    return {
        "job_id": job_id,
        "round_id": info.payload.get("round_id"),
        "seq": info.seq,
        "guess": info.payload.get("guess"),
        "state": info.state,
        "attempts": info.attempts,
        "score": None,
    }
