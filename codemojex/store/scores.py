"""Scored guesses: the idempotent write at the heart of exactly-once scoring.

EchoMQ delivers a guess at least once: a worker killed after its SQL commit but before
completing the job leaves the job to be scored again, and a zombie may race its
successor. What makes the effect exactly-once is this module: the score row is keyed on
the JOB id, and the standings move only in the transaction that inserted that row.

Standings are maxima, not sums of events: a player's round points are the best
``(points, earliest seq)`` over their scored guesses, and their totals are recomputed from
their round points. So the result depends only on *which* guesses were scored, never on
the order in which they were scored, retried or raced.

Scores are written in batches (:func:`record_scores`; a ScoreWorker's handlers share them
through :class:`~codemojex.store.GroupCommit`): one transaction and a handful of
constant-shape, driver-level statements per batch — on SQLite the whole transaction in one
trip to the connection's thread — because per guess, SQLAlchemy statement building and
aiosqlite thread hops, not SQLite, were what a worker spent its CPU on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import delete, false, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from codemojex.store._sql import dump_list, first_row, load_list
from codemojex.store._sqlite_writer import writer_lock
from codemojex.store.models import ScoreRow
from codemojex.store.records import ScoreRecord

__all__ = ["check_writable", "record_score", "record_scores", "score_by_job", "scores_for"]

# PostgreSQL SQLSTATEs after which the whole batch transaction is simply run again:
# deadlock_detected and serialization_failure. Lock order makes deadlocks between
# scorers impossible (see _Statements); this covers anything else that takes these locks.
_RETRY_SQLSTATES = frozenset({"40P01", "40001"})
_RETRIES = 5


async def record_score(engine: AsyncEngine, score: ScoreRecord) -> bool:
    """Write ``score`` and move the standings, once per JOB id. True iff this call wrote it.

    :func:`record_scores` with a batch of one.
    """
    return score.job_id in await record_scores(engine, (score,))


async def record_scores(engine: AsyncEngine, records: Sequence[ScoreRecord]) -> set[str]:
    """Write a batch of scores and move the standings, in ONE transaction, once per JOB id.

    Returns the JOB ids this call wrote for the first time. A record whose JOB id is
    already stored (a retry, a zombie, a concurrent duplicate) changes nothing; within
    the batch, the first record of a JOB id is the one written. The result — score rows,
    round points, totals — is exactly that of writing the records one at a time, in any
    order, with :func:`record_score`: standings are maxima over the scored set.

    A handful of statements per batch, not per guess:

    1. insert the score rows, ``ON CONFLICT (job_id) DO NOTHING RETURNING job_id``;
    2. of the inserted ones, the best guess per (player, round) — reduced here — upserted
       into ``round_points`` only where it beats the stored best, ``RETURNING player_id``;
    3. for the players whose round points moved: (PostgreSQL) create-or-lock their
       totals rows, then recompute those totals from ``round_points`` in one statement.

    Nothing is committed unless all of it is. On PostgreSQL a deadlock or serialization
    failure reruns the transaction (a few times); any other error propagates and nothing
    of the batch is written.
    """
    if not records:
        return set()
    rows: dict[str, ScoreRecord] = {}
    for r in records:
        rows.setdefault(r.job_id, r)  # first write wins within the batch too
    # Sorted by JOB id: concurrent PostgreSQL transactions take the unique-index locks of
    # overlapping batches in the same order, so they wait for each other, never deadlock.
    batch = [rows[k] for k in sorted(rows)]
    sql = _statements(engine.dialect.name)
    if engine.dialect.driver == "aiosqlite":
        return await _write_sqlite(engine, sql, batch)
    attempt = 0
    while True:
        attempt += 1
        try:
            async with engine.begin() as conn:
                return await _write(conn, _steps(sql, batch))
        except DBAPIError as e:
            if attempt >= _RETRIES or _sqlstate(e) not in _RETRY_SQLSTATES:
                raise
        await asyncio.sleep(0.002 * attempt)


async def check_writable(engine: AsyncEngine) -> None:
    """Raise what a score write would raise if the database cannot take one now (refused,
    restarting, locked by another writer past the busy timeout); write nothing.

    A ``DELETE`` that matches no row is still a write: on SQLite it takes the write lock,
    as a score write must (a plain ``SELECT 1`` reads straight past another connection's
    ``BEGIN EXCLUSIVE`` in WAL mode), and PostgreSQL runs it only on a live primary. The
    transaction is rolled back."""
    async with engine.connect() as conn:
        await conn.execute(delete(ScoreRow).where(false()))
        await conn.rollback()


# The batch write as a plan, free of I/O: it yields (statement, parameters), is sent each
# statement's rows back, and returns the JOB ids it wrote. Driven by an async driver
# (PostgreSQL) or synchronously inside SQLite's connection thread.
_Steps = Generator[tuple[str, tuple[Any, ...]], Sequence[Any], set[str]]


def _steps(sql: _Statements, batch: list[ScoreRecord]) -> _Steps:
    inserted = {row[0] for row in (yield sql.insert_scores, sql.score_params(batch))}
    if not inserted:
        return inserted
    best = _best_per_round(r for r in batch if r.job_id in inserted)
    moved = sorted({row[0] for row in (yield sql.raise_round_points, sql.round_params(best))})
    if moved:
        if sql.lock_totals is not None:
            yield sql.lock_totals, sql.players_params(moved)
        yield sql.refresh_totals, sql.players_params(moved)
    return inserted


async def _write(conn: AsyncConnection, steps: _Steps) -> set[str]:
    try:
        statement, params = next(steps)
        while True:
            result = await conn.exec_driver_sql(statement, params)
            statement, params = steps.send(result.all() if result.returns_rows else ())
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _write_sync(db: sqlite3.Connection, steps: _Steps) -> set[str]:
    """The whole transaction, run in the aiosqlite connection's own thread."""
    statement, params = "BEGIN", ()  # deferred: the first statement is a write, so it
    try:  # waits for the write lock (busy_timeout) before reading anything
        db.execute(statement)
        try:
            statement, params = next(steps)
            while True:
                rows = db.execute(statement, params).fetchall()
                statement, params = steps.send(rows)
        except StopIteration as done:
            inserted: set[str] = done.value
        statement, params = "COMMIT", ()
        db.execute(statement)
        return inserted
    except sqlite3.Error as e:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise DBAPIError.instance(statement, params, e, sqlite3.Error) from e
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


async def _write_sqlite(
    engine: AsyncEngine, sql: _Statements, batch: list[ScoreRecord]
) -> set[str]:
    """The batch on SQLite in ONE trip to the aiosqlite connection's thread: the whole
    transaction runs there as plain ``sqlite3`` calls, where going through SQLAlchemy's
    cursor adapter costs four trips per statement (~0.09 ms of CPU each). That uses
    aiosqlite's ``_execute`` (the version is pinned); were it gone, one trip per statement
    through the public ``execute_fetchall``. Errors come out as SQLAlchemy's, as on the
    usual path. Score writers of one file take turns on a kernel lock first (see
    ``_sqlite_writer``) rather than in SQLite's sleeping busy handler."""
    async with writer_lock(engine), engine.connect() as conn:
        db = (await conn.get_raw_connection()).driver_connection
        assert db is not None
        run_in_thread = getattr(db, "_execute", None)
        if run_in_thread is not None and hasattr(db, "_conn"):
            written: set[str] = await run_in_thread(
                lambda: _write_sync(db._conn, _steps(sql, batch))
            )
            return written
        return await _write_public(db, _steps(sql, batch))


async def _write_public(db: Any, steps: _Steps) -> set[str]:
    async def execute(statement: str, params: tuple[Any, ...] = ()) -> Sequence[Any]:
        try:
            return list(await db.execute_fetchall(statement, params))
        except sqlite3.Error as e:
            raise DBAPIError.instance(statement, params, e, sqlite3.Error) from e

    await execute("BEGIN")
    try:
        try:
            statement, params = next(steps)
            while True:
                statement, params = steps.send(await execute(statement, params))
        except StopIteration as done:
            inserted: set[str] = done.value
        await execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # else the pool's reset on checkin rolls back anyway
            with contextlib.suppress(sqlite3.Error):
                await db.rollback()
        raise
    return inserted


def _best_per_round(records: Iterable[ScoreRecord]) -> list[ScoreRecord]:
    """The best guess per (player, round), sorted by (player, round).

    Best = most points, then lowest seq, then lowest JOB id: a total order, so the best
    of a set of guesses is the same whatever order they arrive in — and the best of the
    batch beats the stored best exactly when one of the batch's guesses would have.
    Sorted so concurrent PostgreSQL transactions lock ``round_points`` rows in one order.
    """
    best: dict[tuple[str, str], ScoreRecord] = {}
    for r in records:
        key = (r.player_id, r.round_id)
        cur = best.get(key)
        if cur is None or (-r.points, r.seq, r.job_id) < (-cur.points, cur.seq, cur.job_id):
            best[key] = r
    return [best[k] for k in sorted(best)]


def _sqlstate(e: DBAPIError) -> str | None:
    orig = e.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return str(code) if code is not None else None


# --- the statements, built once per backend ------------------------------------------

_SCORE_COLUMNS = (
    "job_id, round_id, player_id, seq, guess, exact, near, solved, points, "
    "accepted_at_ms, scored_at_ms, attempts, worker_id"
)
_ROUND_COLUMNS = "player_id, round_id, points, best_seq, best_job_id, reached_at_ms"

# The guess beats the stored best: (-points, seq, job id) is smaller. {c} is the
# collation clause that makes PostgreSQL compare ids by code point, as Python does.
_BEATS = (
    "excluded.points > round_points.points OR (excluded.points = round_points.points AND "
    "(excluded.best_seq < round_points.best_seq OR (excluded.best_seq = round_points.best_seq "
    "AND excluded.best_job_id{c} < round_points.best_job_id{c})))"
)
_C_COLLATION = ' COLLATE "C"'
_RAISE_SET = (
    "points = excluded.points, best_seq = excluded.best_seq, "
    "best_job_id = excluded.best_job_id, reached_at_ms = excluded.reached_at_ms"
)
# A player's totals from their round points: reached_at is the latest reached_at of a
# round that paid; a player with no points yet ranks by their first scored guess.
_TOTALS_SELECT = (
    "SELECT player_id, SUM(points), SUM(CASE WHEN points > 0 THEN 1 ELSE 0 END), "
    "COALESCE(MAX(CASE WHEN points > 0 THEN reached_at_ms END), MIN(reached_at_ms)) "
    "FROM round_points WHERE player_id IN ({players}) GROUP BY player_id"
)
_TOTALS_UPSERT = (
    "INSERT INTO totals (player_id, points, solved_rounds, reached_at_ms) "
    + _TOTALS_SELECT
    + " ON CONFLICT (player_id) DO UPDATE SET points = excluded.points, "
    "solved_rounds = excluded.solved_rounds, reached_at_ms = excluded.reached_at_ms"
)


@dataclass(frozen=True, slots=True)
class _Statements:
    """The batch write's SQL for one backend, as driver-level text with constant shape.

    Every statement takes the whole batch as one or a few parameters (a JSON array on
    SQLite, typed arrays on PostgreSQL), so its text never depends on the batch size:
    SQLAlchemy compiles nothing, the driver prepares each statement once and reuses it.

    Lock order on PostgreSQL, the same in every transaction: score rows by JOB id, then
    round points by (player, round), then totals by player — so two scorers whose
    batches overlap wait for each other and never deadlock.
    """

    insert_scores: str
    raise_round_points: str
    lock_totals: str | None  # None: SQLite's single writer already serialises
    refresh_totals: str
    columnar: bool  # PostgreSQL: one array per column; SQLite: one JSON array of rows

    def score_params(self, batch: Sequence[ScoreRecord]) -> tuple[Any, ...]:
        rows = [
            (r.job_id, r.round_id, r.player_id, r.seq, dump_list(r.guess), r.exact, r.near,
             r.solved, r.points, r.accepted_at_ms, r.scored_at_ms, r.attempts, r.worker_id)
            for r in batch
        ]  # fmt: skip
        return self._pack(rows)

    def round_params(self, best: Sequence[ScoreRecord]) -> tuple[Any, ...]:
        rows = [
            (r.player_id, r.round_id, r.points, r.seq, r.job_id, r.accepted_at_ms) for r in best
        ]
        return self._pack(rows)

    def players_params(self, players: Sequence[str]) -> tuple[Any, ...]:
        return (list(players),) if self.columnar else (orjson.dumps(players).decode(),)

    def _pack(self, rows: list[tuple[Any, ...]]) -> tuple[Any, ...]:
        if self.columnar:
            return tuple(list(col) for col in zip(*rows, strict=True))
        return (orjson.dumps(rows).decode(),)


def _sqlite_statements() -> _Statements:
    def from_json(n: int) -> str:
        cols = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(n))
        # WHERE true: SQLite's parser needs it between INSERT … SELECT and ON CONFLICT.
        return f"SELECT {cols} FROM json_each(?) WHERE true ORDER BY key"

    players = "SELECT value FROM json_each(?)"
    return _Statements(
        insert_scores=(
            f"INSERT INTO scores ({_SCORE_COLUMNS}) {from_json(13)} "
            "ON CONFLICT (job_id) DO NOTHING RETURNING job_id"
        ),
        raise_round_points=(
            f"INSERT INTO round_points ({_ROUND_COLUMNS}) {from_json(6)} "
            f"ON CONFLICT (player_id, round_id) DO UPDATE SET {_RAISE_SET} "
            f"WHERE {_BEATS.format(c='')} RETURNING player_id"
        ),
        lock_totals=None,
        refresh_totals=_TOTALS_UPSERT.format(players=players),
        columnar=False,
    )


def _postgresql_statements() -> _Statements:
    score_types = ("text", "text", "text", "int4", "text", "int4", "int4", "bool", "int4",
                   "int8", "int8", "int4", "text")  # fmt: skip
    round_types = ("text", "text", "int4", "int4", "text", "int8")

    def from_arrays(types: Sequence[str]) -> str:
        args = ", ".join(f"${i}::{t}[]" for i, t in enumerate(types, start=1))
        return f"SELECT * FROM unnest({args})"

    players = "SELECT unnest($1::text[])"
    return _Statements(
        insert_scores=(
            f"INSERT INTO scores ({_SCORE_COLUMNS}) {from_arrays(score_types)} "
            "ON CONFLICT (job_id) DO NOTHING RETURNING job_id"
        ),
        raise_round_points=(
            f"INSERT INTO round_points ({_ROUND_COLUMNS}) {from_arrays(round_types)} "
            f"ON CONFLICT (player_id, round_id) DO UPDATE SET {_RAISE_SET} "
            f"WHERE {_BEATS.format(c=_C_COLLATION)} RETURNING player_id"
        ),
        # Create the totals rows that are missing and lock them all, in player order,
        # before the refresh reads round points. Without the lock, two transactions
        # scoring one player in *different* rounds would each recompute the totals
        # without seeing the other's round (read committed) and one update would be
        # lost. DO UPDATE (a no-op) locks an existing row as SELECT … FOR UPDATE would;
        # the refresh is a later statement, so its snapshot sees every committed round.
        lock_totals=(
            "INSERT INTO totals (player_id, points, solved_rounds, reached_at_ms) "
            "SELECT p, 0, 0, 0 FROM unnest($1::text[]) AS p "
            "ON CONFLICT (player_id) DO UPDATE SET points = totals.points"
        ),
        refresh_totals=_TOTALS_UPSERT.format(players=players),
        columnar=True,
    )


@functools.cache
def _statements(dialect: str) -> _Statements:
    if dialect == "sqlite":
        return _sqlite_statements()
    if dialect == "postgresql":
        return _postgresql_statements()
    raise NotImplementedError(f"the durable floor supports sqlite and postgresql, not {dialect}")


async def score_by_job(engine: AsyncEngine, job_id: str) -> ScoreRecord | None:
    """The score written for ``job_id``, if it has been scored."""
    row = await first_row(engine, select(ScoreRow).where(ScoreRow.job_id == job_id))
    return _score(row) if row is not None else None


async def scores_for(
    engine: AsyncEngine, player_id: str, round_id: str | None = None
) -> list[ScoreRecord]:
    """A player's scored guesses, in one round (by seq) or in all (by acceptance)."""
    stmt = select(ScoreRow).where(ScoreRow.player_id == player_id)
    if round_id is not None:
        stmt = stmt.where(ScoreRow.round_id == round_id).order_by(ScoreRow.seq, ScoreRow.job_id)
    else:
        stmt = stmt.order_by(ScoreRow.accepted_at_ms, ScoreRow.job_id)
    async with engine.connect() as conn:
        return [_score(row) for row in await conn.execute(stmt)]


def _score(row: Any) -> ScoreRecord:
    return ScoreRecord(
        job_id=row.job_id,
        round_id=row.round_id,
        player_id=row.player_id,
        seq=row.seq,
        guess=load_list(row.guess),
        exact=row.exact,
        near=row.near,
        solved=bool(row.solved),
        points=row.points,
        accepted_at_ms=row.accepted_at_ms,
        scored_at_ms=row.scored_at_ms,
        attempts=row.attempts,
        worker_id=row.worker_id,
    )
