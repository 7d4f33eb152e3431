"""The hub: one reader per web process follows the events streams and fans out to sockets.

One task XREAD-BLOCKs on the guesses queue's events (``emq:{guesses}:events``, or every
partition's stream of a partitioned queue) and the rounds queue's events
(``emq:{rounds}:events``) on a connection of its own (on a cluster, one task per stream:
XREAD cannot span slots), and turns them into socket messages:

* a guess's ``completed`` event → a ``score`` message to that guess's own player only
  (the emojis of a guess never reach anyone else);
* the same event → the field's ``progress`` (counts only, :mod:`web.progress`), coalesced
  and bounded: the round's counts and its 20 leaders, at most one message per round every
  250 ms and only when it changed, so a flood of guesses never becomes a flood of messages;
* a round rotation (``completed`` on the rounds queue, result ``{closed, opened}``) →
  ``round`` messages: the closed round with its secret, then the new open one;
* a solve → the ``leaderboard``, re-read from SQL at most once a second.

The fan-out costs one write per socket: a broadcast is encoded and framed once
(:mod:`web.frames`) and the same bytes go to every socket's transport, with no task, queue
or copy per socket. It is also paced so a crowd never becomes a flood of bytes: after each
broadcast the flusher stays quiet long enough that every socket gets at most
:data:`SOCKET_BYTES_PER_S` of progress and leaderboards, and the process writes at most
:data:`FANOUT_FRAMES_PER_S` such frames a second in all (with 10,000 sockets, one progress
message every 2 s), yielding to the event loop every :data:`FANOUT_SLICE` sockets so that
guesses keep being answered while it writes. The hub never waits for a socket: one whose
unsent bytes pass its bound is evicted (:mod:`web.outbox`) — closed with 4008, and the page
resumes with ``after=`` (:mod:`web.replay`) — so a slow browser cannot slow the others.
Which sockets there are, and who makes room in a full process, is :mod:`web.sockets`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import echomq
from codemojex import store, tracing
from codemojex.game import Game
from codemojex.views import Standing
from echomq.backoff import Backoff
from echomq.connection import Client, is_cluster
from echomq.events import Tail
from echomq.ids import ulid_time_ms
from web.frames import FrameSink
from web.messages import PING, parse_event_id, progress_topic, score_message
from web.metrics import Metrics
from web.outbox import OUTBOX_BYTES, Connection, Outgoing
from web.progress import FieldProgress, RoundProgress
from web.sockets import Sockets

log = logging.getLogger("codemojex.web.hub")

PROGRESS_INTERVAL_S = 0.25  # at most ~4 progress messages a second per socket
LEADERBOARD_INTERVAL_S = 1.0
# The fan-out budget. Per socket: the contract's bound for an idle socket is 4 KiB/s, and
# round changes and pings come on top of what the flusher sends. Per process: a write of a
# 2.9 KB frame cost the web about 17 us on loopback (the kernel's share included; bench_game
# --watchers 9800), so 5,000 a second is under a tenth of a core and a crowd stretches the
# interval instead of taking the loop.
SOCKET_BYTES_PER_S = 3_584
FANOUT_FRAMES_PER_S = 5_000
# A paced broadcast yields to the event loop after this many sockets, so a crowd's fan-out
# (10,000 writes) never holds a guess's request behind it for the whole of it.
FANOUT_SLICE = 64
PING_INTERVAL_S = 20.0  # a socket that was sent nothing this long gets a ping (proxies)
PING_SWEEP_S = 1.0
BLOCK_MS = 5_000
# Longer than the XREAD block, so it fires only on a server that has silently gone away.
READER_SOCKET_TIMEOUT_S = BLOCK_MS / 1000 + 10
READ_COUNT = 500
# Bounded: a cancel that lands while the client library is still setting up its connection
# can be held there (seen on uvloop when the server failed to bind right after start-up),
# and a process that is shutting down must not hang on it.
STOP_TIMEOUT_S = 2.0


class Hub:
    def __init__(self, game: Game, metrics: Metrics) -> None:
        self.game = game
        self.metrics = metrics
        # The queues whose events are scores (every partition's), and the rounds queue.
        self.guess_queues = {q.name for q in game.queues.partitions}
        self.outbox_limit = OUTBOX_BYTES
        self.progress = FieldProgress()
        self._progress_sent: dict[str, bytes] = {}  # round id -> the last progress frame sent
        self._quiet_until = 0.0  # the fan-out budget: no paced broadcast before this
        self.registry = Sockets(game.config, metrics)
        # The registry's own set and index, read in place on every broadcast and score.
        self._conns = self.registry.conns
        self._by_player = self.registry.by_player
        self._names: dict[str, str] = {}
        self._board: list[Standing] | None = None  # what the sockets were last sent
        self._board_dirty = True
        self._board_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._readers: list[Client] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        tracing.configure("codemojex-web")  # decided once per process, from OTEL_*
        queues = [
            *sorted(self.game.queues.partitions, key=lambda q: q.name),
            self.game.rounds.queue,
        ]
        assert self.game.config.valkey_url
        # XREAD cannot span slots: on a cluster (each queue in its own slot) every stream
        # has a reader of its own; on one server one XREAD follows both.
        groups = [[q] for q in queues] if is_cluster(self.game.config.valkey_url) else [queues]
        self._tasks = [
            *(asyncio.create_task(self._follow(g), name="hub-reader") for g in groups),
            asyncio.create_task(self._flush_forever(), name="hub-flusher"),
            asyncio.create_task(self._ping_forever(), name="hub-pinger"),
        ]

    async def close(self) -> None:
        """Stop the reader and the flusher, waiting at most :data:`STOP_TIMEOUT_S` for them."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_S)
            for task in stuck:
                log.warning(
                    "hub: %s did not stop within %.0f s; leaving it",
                    task.get_name(),
                    STOP_TIMEOUT_S,
                )
        self._tasks = []
        for reader in self._readers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    await reader.aclose()
        self._readers = []

    # -- sockets --------------------------------------------------------------------------------

    def admits(self, player_id: str, address: str = "") -> bool:
        """Whether one more socket fits (:meth:`web.sockets.Sockets.admits`)."""
        return self.registry.admits(player_id, address)

    def join(self, player_id: str, sink: FrameSink, address: str = "") -> Connection:
        conn = Connection(player_id, sink, address, self.outbox_limit)
        self.registry.join(conn)
        return conn

    def leave(self, conn: Connection) -> None:
        self.registry.leave(conn)

    @property
    def sockets(self) -> int:
        return len(self._conns)

    def broadcast(self, message: dict[str, Any]) -> int:
        """Offer ``message`` to every socket (encoded and framed once); how many took it."""
        return self._fanout(Outgoing.of(message))

    def _fanout(self, out: Outgoing) -> int:
        taken = 0
        for conn in list(self._conns):
            taken += self.offer(conn, out)
        self.metrics.broadcast_frames.inc(taken)
        return taken

    async def _fanout_sliced(self, out: Outgoing) -> int:
        """:meth:`_fanout`, yielding every :data:`FANOUT_SLICE` sockets. A socket that
        joins meanwhile is not sent this one; it was just greeted with the snapshot."""
        taken = 0
        conns = list(self._conns)
        for start in range(0, len(conns), FANOUT_SLICE):
            if start:
                await asyncio.sleep(0)
            for conn in conns[start : start + FANOUT_SLICE]:
                if conn in self._conns:  # not gone meanwhile
                    taken += self.offer(conn, out)
        self.metrics.broadcast_frames.inc(taken)
        return taken

    def offer(self, conn: Connection, message: Outgoing) -> bool:
        if conn.offer(message):
            return True
        if conn.evicted and conn in self._conns:
            self.metrics.sockets_evicted.inc()
            self.leave(conn)  # stop feeding it: it was sent its close (4008)
        return False

    # -- what a new socket gets first --------------------------------------------------------

    async def leaderboard(self) -> list[Standing]:
        """The leaderboard for a new socket: the last one broadcast while it is current."""
        if self._board is not None and not self._board_dirty:
            return self._board
        # Not stored: `_board` is what the sockets were last sent, and the flusher
        # compares against it to decide whether they need the new one.
        return await self.game.leaderboard()

    async def progress_snapshot(self, round_id: str) -> Outgoing | None:
        """The round's progress for a new socket, bounded the same way: the frame the
        others were last sent if nothing changed since, else a fresh one (the budget may
        be keeping the others' next one back). None before anyone guessed."""
        r = self.progress.round(round_id)
        if r is None or not r.playing:
            return None
        sent = self._progress_sent.get(round_id)
        if sent is not None and not r.changed:
            return Outgoing(sent, topic=progress_topic(round_id))
        return await self._progress_out(round_id, r)  # newer than what the others have

    # -- the reader -----------------------------------------------------------------------------

    async def _follow(self, queues: Sequence[echomq.Queue]) -> None:
        assert self.game.config.valkey_url
        reader = echomq.connect(
            self.game.config.valkey_url,
            socket_timeout=READER_SOCKET_TIMEOUT_S,
            socket_connect_timeout=2,
            socket_keepalive=True,
        )
        self._readers.append(reader)
        # From the streams' ends: a socket that needs older events asks for them with
        # after= (replay), not through the live fan-out. The tail outlives any outage:
        # it reads again with backoff from where it was, and each failure is logged.
        tail = Tail(
            queues,
            conn=reader,
            after="$",
            block_ms=BLOCK_MS,
            count=READ_COUNT,
            backoff=Backoff(first=0.1, cap=5.0, jitter=False),
            on_error=_reader_failed,
        )
        async for batch in tail.batches():
            for queue, event in batch:
                try:
                    if queue.name in self.guess_queues:
                        self._on_guess_event(event)
                    else:
                        await self._on_round_event(event)
                except Exception:  # one bad event must not stop the feed
                    log.exception("events reader: could not handle %s", event.event_id)

    def _on_guess_event(self, event: echomq.Event) -> None:
        msg = score_message(event)
        if msg is None:
            return
        self._observe_latency(event)
        traced = tracing.enabled()
        started_ns = time.time_ns() if traced else 0
        out = Outgoing.of(msg, event.job_id)
        pushed = 0
        for conn in list(self._by_player.get(msg["player_id"], ())):
            if self.offer(conn, out):
                self.metrics.scores_pushed.inc()
                pushed += 1
        if traced:  # the worker put its span's traceparent on the result
            tracing.record_push(
                event.result, job_id=event.job_id, started_ns=started_ns, sockets=pushed
            )
        if isinstance(msg["round_id"], str):
            self.progress.scored(
                msg["round_id"],
                msg["player_id"],
                msg["seq"],
                msg["exact"],
                msg["near"],
                bool(msg["solved"]),
            )
        if msg["solved"]:
            self._board_dirty = True  # only a solve can change anyone's points

    def _observe_latency(self, event: echomq.Event) -> None:
        done = parse_event_id(event.event_id)
        try:
            accepted_ms = ulid_time_ms(event.job_id)
        except ValueError:
            return
        if done is not None and done[0] >= accepted_ms:
            self.metrics.score_latency.observe((done[0] - accepted_ms) / 1000)

    async def _on_round_event(self, event: echomq.Event) -> None:
        if event.type != "completed":
            return
        result = event.result
        if not isinstance(result, dict):
            return
        now = await self.game.queues.server_time_ms()
        for round_id in (result.get("closed"), result.get("opened")):
            if not isinstance(round_id, str):
                continue
            info = await self.game.rounds.get(round_id)
            if info is not None:
                self.broadcast({"type": "round", **info.public(now)})
                self.progress.opened(round_id)

    # -- the flusher ----------------------------------------------------------------------------

    async def _flush_forever(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(max(PROGRESS_INTERVAL_S, self._quiet_until - started))
            try:
                await self.flush()
            except Exception as exc:  # noqa: BLE001 - retried next tick, changes kept
                log.warning("hub flush: %s: %s", type(exc).__name__, exc)

    async def flush(self) -> None:
        """Send each changed round's progress and, if due, the leaderboard — unless the
        fan-out budget says the sockets were sent enough for now."""
        started = time.monotonic()
        if started < self._quiet_until:
            return
        frames = nbytes = 0
        changed = self.progress.take_changed()
        try:
            for round_id, r in changed:
                out = await self._progress_out(round_id, r)
                if out.frame == self._progress_sent.get(round_id):
                    continue  # nothing in it changed (a change may leave the message alike)
                self._progress_sent[round_id] = out.frame
                await self._fanout_sliced(out)
                frames, nbytes = frames + 1, nbytes + len(out.frame)
        except BaseException:
            for _, r in changed:
                r.changed = True  # the names could not be read: send it next time
            raise
        for round_id in [k for k in self._progress_sent if self.progress.round(k) is None]:
            del self._progress_sent[round_id]
        now = time.monotonic()
        if self._board_dirty and now - self._board_at >= LEADERBOARD_INTERVAL_S:
            self._board_at = now
            self._board_dirty = False  # before the read: a solve meanwhile marks it again
            try:
                board = await self.game.leaderboard()
            except BaseException:
                self._board_dirty = True
                raise
            if board != self._board:
                self._board = board
                out = Outgoing.of({"type": "leaderboard", "players": board})
                await self._fanout_sliced(out)
                frames, nbytes = frames + 1, nbytes + len(out.frame)
        if frames:
            quiet = max(nbytes / SOCKET_BYTES_PER_S, frames * self.sockets / FANOUT_FRAMES_PER_S)
            self._quiet_until = started + quiet
            self.metrics.progress_quiet.set(quiet)

    async def _progress_out(self, round_id: str, r: RoundProgress) -> Outgoing:
        leaders = r.top()
        names = await self._names_of([pid for pid, _ in leaders])
        return Outgoing.of(
            {
                "type": "progress",
                "round_id": round_id,
                "playing": r.playing,
                "guesses": r.guesses,
                "solved": r.solved,
                "players": [p.row(pid, names[pid]) for pid, p in leaders],
            },
            topic=progress_topic(round_id),
        )

    async def _names_of(self, player_ids: Sequence[str]) -> dict[str, str]:
        missing = [pid for pid in player_ids if pid not in self._names]
        if missing:
            self._names.update(await store.player_names(self.game.engine, missing))
        return {pid: self._names.get(pid, "") for pid in player_ids}

    # -- keep-alive -----------------------------------------------------------------------------

    async def _ping_forever(self) -> None:
        """A socket that was sent nothing for :data:`PING_INTERVAL_S` gets a ``ping``
        message, which keeps it alive through proxies that cut quiet connections; one
        sweep for the process instead of a timer per socket."""
        while True:
            await asyncio.sleep(PING_SWEEP_S)
            idle_since = time.monotonic() - PING_INTERVAL_S
            for conn in [c for c in self._conns if c.wrote_at <= idle_since]:
                self.offer(conn, PING)


def _reader_failed(exc: BaseException, delay: float) -> None:
    log.warning("events reader: %s: %s; retrying in %.1fs", type(exc).__name__, exc, delay)
