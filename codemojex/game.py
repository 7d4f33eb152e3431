"""``Game``: the game's services over one Valkey connection and one SQL engine.

The web layer and the worker processes both build one; it holds no state of its own
beyond caches of immutable things (rounds).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.ext.asyncio import AsyncEngine

import echomq
import echomq.admin
import echomq.registry
from codemojex import control, layout, store
from codemojex.admission import TokenBuckets, address_key
from codemojex.config import GUESS_QUEUE, Config
from codemojex.errors import (
    Conflict,
    JobNotFound,
    NotYourGuess,
    RoundNotFound,
    Unauthorized,
    Unavailable,
)
from codemojex.guesses import Accepted, Guesses, player_of
from codemojex.rounds import RoundInfo, Rounds
from codemojex.rules import validate_name
from codemojex.views import (
    DeadJobView,
    GuessView,
    QueueCounters,
    QueueView,
    RoundView,
    Standing,
    WorkerView,
)
from echomq.codec import text
from echomq.connection import Client

log = logging.getLogger("codemojex.game")

# Players known by their token's hash, per process. A player row never changes or goes
# away, so a hit can never be stale; only hits are kept (a wrong token costs a query, and
# guessing tokens fills nothing). Bounded: the least recently used entries leave first.
AUTH_CACHE_SIZE = 100_000
# A player's unscored guesses listed at most (the pending cap keeps them far fewer).
UNFINISHED_LISTED = 1_000
# Valkey connections of one process beyond its door's bound (web/door.py): the hub's
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
        self.new_players = TokenBuckets(
            conn,
            "players",
            config.player_rate,
            config.player_burst,
            "too many new players from this address; try again later",
        )

    @classmethod
    def connect(cls, config: Config) -> Game:
        """The game over a pool that waits for a free connection rather than failing (a
        full redis-py pool raised ``MaxConnectionsError`` at once, and every request of a
        busy web process answered 503 alike), sized above what the door lets in."""
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
        alive = {w.worker_id: w for w in await self.queues.workers()}
        known = await _members(self.conn, control.KNOWN)
        exits = await control.exits(self.conn)
        killed = await control.killed(self.conn)
        now = await self.queues.server_time_ms()
        first = self.queues.partitions[0]  # a worker registers on every partition
        out: list[WorkerView] = []
        for wid in dict.fromkeys([*known, *alive]):
            # Ids are never reused, so a recorded exit is final even while the registry
            # still lists the worker (until its heartbeat lapses).
            w = alive.get(wid) if wid not in exits else None
            if w:
                meta = w.meta
            else:  # gone: its row, while it outlives the registry entry, says who it was
                gone = await echomq.registry.worker(first, wid)
                meta = dict(gone.meta) if gone is not None else {}
            job_id = meta.get("job_id") or None
            lease_ms = None
            if w and job_id:
                info = await self.queues.get(job_id)
                if (
                    info
                    and info.state == "active"
                    and info.worker_id == wid
                    and info.lease_until_ms
                ):
                    lease_ms = max(0, info.lease_until_ms - now)
            ex = exits.get(wid)
            # Spawned but not yet heartbeating (a second or two of start-up): it lives.
            starting = w is None and ex is None and not meta
            out.append(
                {
                    "worker_id": wid,
                    "pid": int(meta["pid"]) if meta.get("pid") else None,
                    "host": meta.get("host"),
                    "state": (meta.get("state") or "idle") if w or starting else "dead",
                    "job_id": job_id if w else None,
                    "lease_remaining_ms": lease_ms,
                    "jobs_done": int(meta.get("scored") or meta.get("jobs_done") or 0),
                    "alive": w is not None or starting,
                    "exit_reason": ex["reason"]
                    if ex
                    else (
                        None
                        if w or starting
                        else ("stopped" if meta.get("stopped") else "heartbeat lapsed")
                    ),
                    # Killed by an order: the jobs it was scoring at that instant, each of which
                    # the reaper must hand to another worker.
                    "killed_holding": killed.get(wid),
                }
            )
        return out


async def _members(conn: Client, key: str) -> list[str]:
    """Every member of the sorted set ``key``, as text, in score order."""
    raw = cast(list[bytes], await conn.zrange(key, 0, -1))
    return [text(x) for x in raw]


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


FLOOR_CURSOR = "cmx:floor:reached_ms"  # the latest death time the durable floor has seen
ARCHIVE_BATCH = 200
ARCHIVE_OVERLAP_MS = 1_000
# Dead jobs kept in Valkey (where an operator's retry finds them); older ones already on
# the durable floor leave it, so a long run of failures cannot fill Valkey's memory.
DEAD_KEPT = 10_000


def floor_cursor(queue_name: str) -> str:
    """The floor's cursor of one partition (the unpartitioned queue keeps the old key)."""
    return FLOOR_CURSOR if queue_name == GUESS_QUEUE else f"{FLOOR_CURSOR}:{queue_name}"


class Admin:
    """Operator actions (admin API). Takes the Game it acts on."""

    def __init__(self, game: Game) -> None:
        self.game = game
        self.queues = game.queues
        self.conn = game.conn

    async def queue_view(self) -> QueueView:
        s = await self.queues.stats()
        c = s["counters"]
        counters: QueueCounters = {
            "accepted": c.get("enqueued", 0),
            "scored": c.get("completed", 0),
            "stale_refused": sum(s["refused"].values()),
            "reclaimed": c.get("reaped", 0),
            "failed": c.get("failed", 0),
            "dead": c.get("dead", 0),
            "retried": c.get("retried", 0),
            "released": c.get("released", 0),
        }
        lanes = sorted(s["lanes"].items(), key=lambda kv: -kv[1])
        return {
            "pending": s["pending"],
            "active": s["active"],
            "scheduled": s["scheduled"],
            "completed": s["completed"],
            "dead": s["dead"],
            "lanes": [{"lane": lane, "depth": d} for lane, d in lanes],
            "lane_count": s["lane_count"],
            "counters": counters,
        }

    async def archive_dead(self, batch: int = ARCHIVE_BATCH, keep: int = DEAD_KEPT) -> int:
        """Copy every dead job not yet on the durable floor into SQL, ``batch`` at a time;
        returns how many deaths this recorded. Then keep at most ``keep`` dead jobs in
        Valkey (split evenly over the partitions): the oldest of those already on the
        floor leave it (``_trim_dead``).

        A partition's sweep starts from the death time it reached last time (kept in
        Valkey, shared by every process; one cursor per partition, each on its own
        master's clock), less ``ARCHIVE_OVERLAP_MS``: a job that died in the same
        millisecond as the last one archived, after that sweep read the set, is not
        skipped. Recording is idempotent, so the overlap costs a few no-op upserts.
        """
        share = -(-keep // len(self.queues))
        moved = 0
        for queue in self.queues.partitions:
            moved += await self._archive_partition(queue, batch, share)
        return moved

    async def _archive_partition(self, queue: echomq.Queue, batch: int, keep: int) -> int:
        cursor = floor_cursor(queue.name)
        raw = await self.conn.get(cursor)
        reached = int(raw) if raw is not None else 0
        since = max(0, reached - ARCHIVE_OVERLAP_MS)
        moved, offset = 0, 0
        while True:
            page = await queue.jobs.dead(limit=batch, since_ms=since, offset=offset)
            # Each death once: the same attempts is a no-op, a job that died again after a
            # retry (higher attempts) reopens its row. One transaction per page.
            moved += await store.upsert_dead_many(
                self.game.engine,
                [
                    store.Death(
                        job_id=info.job_id,
                        queue=queue.name,  # its partition: where a retry finds it
                        lane=info.lane,
                        payload=_json(info.payload),
                        error=info.error,
                        reason=info.reason,
                        attempts=info.attempts,
                        died_at_ms=info.finished_at_ms or 0,
                    )
                    for info in page
                ],
            )
            reached = max([reached, *(info.finished_at_ms or 0 for info in page)])
            if page:
                await self.conn.set(cursor, reached)
            if len(page) < batch:
                break
            offset += len(page)
        await self._trim_dead(queue, keep, safe_before_ms=reached - ARCHIVE_OVERLAP_MS)
        return moved

    async def _trim_dead(self, queue: echomq.Queue, keep: int, safe_before_ms: int) -> int:
        """Discard from ``queue`` the oldest dead jobs beyond ``keep``, only among those
        that died before ``safe_before_ms`` (on the durable floor for sure: a sweep
        recorded them, and the overlap of the next one is still after them). Their floor
        rows stay: the admin page lists them and may discard them; a retry answers 409,
        the queue no longer holds the job. Returns how many left."""
        excess = await echomq.admin.dead_count(queue) - keep
        if excess <= 0 or safe_before_ms <= 0:
            return 0
        ids = await echomq.admin.dead_before(queue, safe_before_ms, limit=min(excess, 1_000))
        trimmed = 0
        for first in range(0, len(ids), 50):  # a few connections at a time, not a thousand
            gone = await asyncio.gather(
                *(queue.jobs.discard(jid) for jid in ids[first : first + 50]),
                return_exceptions=True,
            )
            for outcome in gone:
                # retried or discarded meanwhile: not dead any more, nothing to trim
                if isinstance(outcome, (echomq.JobNotFound, echomq.InvalidState)):
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                trimmed += 1
        return trimmed

    async def _holder_of(self, job_id: str, queue_name: str) -> echomq.Queue | None:
        """The partition a floor row names; a row from before partitions (or another
        layout) is looked for in every partition."""
        return self.queues.named(queue_name) or await self.queues.find(job_id)

    async def dead_jobs(self) -> list[DeadJobView]:
        await self.archive_dead()
        rows = await store.list_dead(self.game.engine)
        return [
            {
                "job_id": d.job_id,
                "lane": d.lane,
                "payload": _loads(d.payload),
                "error": d.error,
                "reason": d.reason,
                "attempts": d.attempts,
                "died_at": d.died_at_ms,
                "retried_at": d.retried_at_ms,
            }
            for d in rows
        ]

    async def retry_dead(self, job_id: str) -> None:
        row = await store.get_dead(self.game.engine, job_id)
        if row is None or row.discarded:
            raise JobNotFound("no such dead job")
        if row.retried_at_ms is not None:
            raise Conflict("that dead job was already retried")
        queue = await self._holder_of(job_id, row.queue)
        try:
            if queue is None:
                raise echomq.JobNotFound(job_id)
            await queue.jobs.retry_dead(job_id)
        except echomq.JobNotFound:
            raise Conflict("the job is no longer held by the queue") from None
        except echomq.InvalidState:
            raise Conflict("the job is not dead any more") from None
        await store.mark_dead_retried(self.game.engine, job_id, await queue.server_time_ms())

    async def discard_dead(self, job_id: str) -> None:
        row = await store.get_dead(self.game.engine, job_id)
        if row is None or not await store.delete_dead(self.game.engine, job_id):
            raise JobNotFound("no such dead job")
        queue = await self._holder_of(job_id, row.queue)
        try:
            if queue is not None:
                await queue.jobs.discard(job_id)
        except (echomq.JobNotFound, echomq.InvalidState):
            pass  # already gone from Valkey (or retried meanwhile): the floor row is what counts

    async def kill_worker(self, worker_id: str) -> None:
        workers = {w["worker_id"]: w for w in await self.game.workers()}
        w = workers.get(worker_id)
        if w is None:
            raise JobNotFound("no such worker")
        if not w["alive"]:
            raise Conflict(f"{worker_id} is already dead")
        await control.order_kill(self.conn, worker_id)

    async def add_worker(self) -> str:
        sid = await control.live_supervisor(self.conn)
        if sid is None:
            raise Conflict("no supervisor runs here: start workers with `codemojex up`")
        worker_id = echomq.worker_id()
        await control.order_spawn(self.conn, sid, worker_id)
        return worker_id


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


def _loads(raw: str) -> Any:
    import orjson

    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
