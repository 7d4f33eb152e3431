"""``echomq``: a queue's state for operators, through the public API only, and ``echomq
worker``, which runs a :class:`~echomq.Consumer` over a handler named on the command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, fields
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit, urlunsplit

import orjson
import redis.exceptions

try:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
except ModuleNotFoundError as missing:  # the `cli` extra; --json needs none of it
    _NO_RICH: str | None = f"tables need {missing.name}: pip install 'echomq[cli]' (or --json)"
else:
    _NO_RICH = None

from . import registry
from .connection import Client, connect
from .consumer import Consumer, Handler
from .errors import EchoMQError, JobNotFound
from .partitions import Partitioned, PartitionedConsumer
from .queue import Queue
from .types import JobInfo

DEFAULT_URL = "redis://127.0.0.1:6379/0"
URL_VARIABLE = "ECHOMQ_URL"
CONNECT_TIMEOUT_S = 5.0  # a host that drops packets: give up after this, not minutes later
PAYLOAD_WIDTH = 60  # characters of a dead job's payload in the table (--json has it whole)

log = logging.getLogger("echomq.worker")

EXIT_REFUSED = 1
EXIT_UNREACHABLE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag costs one line on stderr (and where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


AnyQueue = Queue | Partitioned


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    common = _Parser(add_help=False)
    _url_argument(common)
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _partitions_argument(common)
    common.add_argument("queue", metavar="QUEUE", help="the queue's name (keys emq:{QUEUE}:…)")

    parser = _Parser(prog="echomq", description="Inspect and operate EchoMQ queues.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stats = sub.add_parser("stats", parents=[common], help="where the queue's jobs are")
    stats.add_argument("--lanes", type=_at_least(0), default=20, help="lanes listed (20)")
    stats.set_defaults(run=_stats)

    dead = sub.add_parser("dead", parents=[common], help="dead jobs, oldest death first")
    dead.add_argument("--limit", type=_at_least(1), default=20, help="jobs listed (20)")
    dead.set_defaults(run=_dead)

    retry = sub.add_parser("retry", parents=[common], help="send a dead job back to its lane")
    retry.add_argument("job_id", metavar="JOB_ID")
    retry.set_defaults(run=_retry)

    workers = sub.add_parser("workers", parents=[common], help="the registered workers")
    workers.set_defaults(run=_workers)

    _worker_parser(sub)
    return parser  # its subparsers are _Parser too (argparse makes them of its class)


def _url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get(URL_VARIABLE) or DEFAULT_URL,
        help=f"the Valkey server or cluster (env {URL_VARIABLE}; default {DEFAULT_URL})",
    )


def _partitions_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--partitions",
        type=_at_least(1),
        default=1,
        help="QUEUE is partitioned over this many queues (echomq.Partitioned; default 1)",
    )


# The Consumer's numeric options as `echomq worker` flags: (flag, least, default, help).
# Their defaults are the Consumer's own.
WORKER_NUMBERS: tuple[tuple[str, int, int | None, str], ...] = (
    ("--concurrency", 1, 1, "handlers at once (1)"),
    ("--lease-ms", 100, 10_000, "each claim's lease, renewed while its handler runs (10000)"),
    ("--batch", 1, 32, "jobs leased per claim call (32)"),
    ("--prefetch", 0, 0, "jobs held ready beyond concurrency (0)"),
    ("--timeout-ms", 1, None, "cancel a handler running this long, failing its job (no limit)"),
    ("--lapse-ms", 1, 3_000, "a silent worker's jobs are reclaimed after this (3000)"),
    ("--grace-ms", 0, None, "at a stop, how long running handlers may finish (the lease)"),
)


def _worker_parser(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="run a Consumer over HANDLER (SIGTERM/SIGINT: drain and exit 0)",
        description="Consume QUEUE with HANDLER, an async callable taking an echomq.Claim "
        "(its return value completes the job, an exception fails it).",
    )
    _url_argument(worker)
    worker.add_argument("--queue", required=True, help="the queue's name (keys emq:{QUEUE}:…)")
    _partitions_argument(worker)
    worker.add_argument(
        "--source",
        choices=("lanes", "jobs"),
        default="lanes",
        help="claim from the fair lanes or the plain FIFO queue (lanes)",
    )
    for flag, least, default, text in WORKER_NUMBERS:
        worker.add_argument(flag, type=_at_least(least), default=default, help=text)
    worker.add_argument("--worker-id", default=None, help="a WRK_… id (default: minted)")
    worker.add_argument(
        "--no-reaper",
        dest="reaper",
        action="store_false",
        help="take no part in reaping expired leases",
    )
    worker.add_argument(
        "--app-dir",
        default=".",
        help="put this folder first on the import path for HANDLER (default: .)",
    )
    worker.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="what is logged to stderr (info)",
    )
    worker.add_argument("handler", metavar="HANDLER", help="pkg.module:attr (attr may be dotted)")


def _at_least(low: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {raw!r}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        sys.exit(_worker(args))
    if _NO_RICH is not None and not args.json:
        sys.exit(_fail(_NO_RICH, EXIT_UNREACHABLE))
    # With --json every command prints to stdout before it would reach the console.
    out = Console(highlight=False) if _NO_RICH is None else cast("Console", None)
    try:
        code = asyncio.run(_session(args, out))
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


async def _session(args: argparse.Namespace, out: Console) -> int:
    run: Callable[[AnyQueue, argparse.Namespace, Console], Awaitable[None]] = args.run
    where = redacted(args.url)
    try:
        conn: Client = connect(args.url, socket_connect_timeout=CONNECT_TIMEOUT_S)
    except ValueError as e:  # a URL redis-py cannot read
        return _fail(f"bad --url {where}: {e}", EXIT_UNREACHABLE)
    try:
        q: AnyQueue = (
            Queue(conn, args.queue)
            if args.partitions == 1
            else Partitioned(conn, args.queue, args.partitions)
        )
        await run(q, args, out)
        return 0
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        OSError,
        redis.exceptions.RedisClusterException,
    ) as e:
        # AuthenticationError is a ConnectionError: a wrong password lands here too. A
        # cluster none of whose seeds answers raises RedisClusterException, not a RedisError.
        return _fail(f"cannot reach Valkey at {where}: {e}", EXIT_UNREACHABLE)
    except redis.exceptions.RedisError as e:
        return _fail(f"Valkey at {where} answered an error: {e}", EXIT_UNREACHABLE)
    except JobNotFound as e:
        return _fail(f"no job {e} in queue {args.queue}", EXIT_REFUSED)
    except EchoMQError as e:
        return _fail(str(e), EXIT_REFUSED)
    except ValueError as e:  # a queue name the library refuses
        return _fail(str(e), EXIT_UNREACHABLE)
    finally:
        with contextlib.suppress(Exception):  # closing a client that never connected
            await conn.aclose()


def _fail(message: str, code: int) -> int:
    print(f"echomq: {message}", file=sys.stderr)
    return code


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unreadable url>"


def _table(out: Console, title: str) -> Table:
    """A table, its title printed first on a line of its own (a table's own title wraps at
    the table's width)."""
    out.print(f"[bold]{title}[/bold]")
    return Table()


def _print_json(value: Any) -> None:
    # Straight to stdout: rich would wrap long lines and read [brackets] as markup.
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


# -- the commands ---------------------------------------------------------------------------


async def _stats(q: AnyQueue, args: argparse.Namespace, out: Console) -> None:
    stats = await q.stats(max_lanes=args.lanes)
    if args.json:
        _print_json(stats)
        return
    states = _table(out, f"queue {escape(q.name)}")
    for name in ("pending", "active", "scheduled", "completed", "dead", "lanes"):
        states.add_column(name, justify="right")
    where = (stats["pending"], stats["active"], stats["scheduled"], stats["completed"])
    states.add_row(*(str(n) for n in (*where, stats["dead"], stats["lane_count"])))
    out.print(states)
    if stats["lanes"]:
        shown = len(stats["lanes"])
        lanes = _table(out, f"lanes, served next first ({shown} of {stats['lane_count']})")
        lanes.add_column("lane", overflow="fold")
        lanes.add_column("depth", justify="right")
        for lane, depth in stats["lanes"].items():
            lanes.add_row(escape(lane), str(depth))
        out.print(lanes)
    for title, counts in (
        ("counters", stats["counters"]),
        ("stale calls refused", stats["refused"]),
    ):
        if counts:
            table = _table(out, title)
            table.add_column("name")
            table.add_column("count", justify="right")
            for name, n in sorted(counts.items()):
                table.add_row(escape(name), str(n))
            out.print(table)


def _job_json(info: JobInfo) -> dict[str, Any]:
    # Not dataclasses.asdict: it deep-copies, and a job without headers holds a shared
    # read-only mapping, which cannot be copied.
    row = {f.name: getattr(info, f.name) for f in fields(info)}
    row["headers"] = dict(info.headers)
    return row


async def _dead(q: AnyQueue, args: argparse.Namespace, out: Console) -> None:
    if isinstance(q, Partitioned):  # each partition's oldest, then the oldest of those
        each = await asyncio.gather(*(p.jobs.dead(limit=args.limit) for p in q.partitions))
        jobs = sorted(
            (j for rows in each for j in rows), key=lambda j: (j.finished_at_ms or 0, j.job_id)
        )
        jobs = jobs[: args.limit]
    else:
        jobs = await q.jobs.dead(limit=args.limit)
    if args.json:
        _print_json([_job_json(j) for j in jobs])
        return
    total = (await q.stats(max_lanes=0))["dead"]
    table = _table(out, f"dead jobs in {escape(q.name)} ({len(jobs)} of {total})")
    for name in ("job", "lane", "attempts", "reason", "last error", "died at (ms)", "payload"):
        table.add_column(name, overflow="fold")
    for j in jobs:
        payload = orjson.dumps(j.payload).decode()
        if len(payload) > PAYLOAD_WIDTH:
            payload = payload[: PAYLOAD_WIDTH - 1] + "…"
        table.add_row(
            j.job_id,
            escape(j.lane or "-"),
            str(j.attempts),
            escape(j.reason or "-"),
            escape(j.error or "-"),
            str(j.finished_at_ms or "-"),
            escape(payload),
        )
    out.print(table)


async def _retry(q: AnyQueue, args: argparse.Namespace, out: Console) -> None:
    holder = q if isinstance(q, Queue) else await q.find(args.job_id)
    if holder is None:
        raise JobNotFound(args.job_id)
    await holder.jobs.retry_dead(args.job_id)
    info = await holder.jobs.get(args.job_id)
    state = info.state if info else "gone"
    if args.json:
        _print_json({"job_id": args.job_id, "retried": True, "state": state})
        return
    where = f"lane {info.lane}" if info and info.lane else "the queue"
    out.print(f"{escape(args.job_id)} is back on {escape(where)} ({state})")


async def _workers(q: AnyQueue, args: argparse.Namespace, out: Console) -> None:
    found = await registry.workers(q)
    now = await q.server_time_ms()
    if args.json:
        _print_json(
            {
                "server_now_ms": now,
                "workers": [
                    {**asdict(w), "meta": dict(w.meta), "jobs": list(w.jobs)} for w in found
                ],
            },
        )
        return
    table = _table(out, f"workers of {escape(q.name)} ({len(found)})")
    for name in ("worker", "state", "pid", "host", "jobs held", "jobs done", "beat due in (ms)"):
        table.add_column(name, overflow="fold")
    for w in found:
        table.add_row(
            escape(w.worker_id),
            escape(w.state or "-"),
            str(w.pid or "-"),
            escape(w.host or "-"),
            escape(", ".join(w.jobs) or "-"),
            str(w.jobs_done),
            str(w.deadline_ms - now) if w.deadline_ms is not None else "-",
        )
    out.print(table)


# -- echomq worker ---------------------------------------------------------------------------


class BadHandler(Exception):
    """``echomq worker``'s HANDLER names no async callable (the message says why)."""


def load_handler(target: str, app_dir: str | None = ".") -> Handler:
    """The async callable ``target`` names (``pkg.module:attr``, ``attr`` may be dotted),
    imported with ``app_dir`` first on the import path; :class:`BadHandler` otherwise."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BadHandler(f"HANDLER must be pkg.module:attr, got {target!r}")
    if app_dir is not None:
        folder = os.path.abspath(app_dir)
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as e:  # whatever the module raised, said in one line
        raise BadHandler(f"cannot import {module_name}: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise BadHandler(f"{module_name} has no attribute {attr}") from None
    if not callable(found):
        raise BadHandler(f"{target} is not callable (it is a {type(found).__name__})")
    if inspect.isfunction(found) and not inspect.iscoroutinefunction(found):
        raise BadHandler(f"{target} is not async: a handler is an async def taking a Claim")
    return cast("Handler", found)


def _worker(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        handler = load_handler(args.handler, args.app_dir)
    except BadHandler as e:
        return _fail(str(e), EXIT_UNREACHABLE)
    try:
        return asyncio.run(_consume(args, handler))
    except KeyboardInterrupt:  # a second Ctrl-C while draining
        return 130


async def _consume(args: argparse.Namespace, handler: Handler) -> int:
    where = redacted(args.url)
    try:
        conn: Client = connect(args.url, socket_connect_timeout=CONNECT_TIMEOUT_S)
    except ValueError as e:
        return _fail(f"bad --url {where}: {e}", EXIT_UNREACHABLE)
    try:
        names = [
            flag[2:].replace("-", "_") for flag, *_ in WORKER_NUMBERS if flag != "--concurrency"
        ]
        options: dict[str, Any] = {n: getattr(args, n) for n in (*names, "source", "reaper")}
        consumer: Consumer | PartitionedConsumer
        if args.partitions == 1:
            consumer = Consumer(
                Queue(conn, args.queue),
                handler,
                concurrency=args.concurrency,
                worker_id=args.worker_id,
                **options,
            )
        else:
            consumer = PartitionedConsumer(
                Partitioned(conn, args.queue, args.partitions),
                handler,
                concurrency=args.concurrency,
                worker_id=args.worker_id,
                **options,
            )
    except (TypeError, ValueError) as e:  # options the Consumer refuses
        await conn.aclose()
        return _fail(str(e), EXIT_UNREACHABLE)
    loop = asyncio.get_running_loop()
    # As Consumer.run(install_signal_handlers=True), for a partitioned consumer too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, consumer.stop)
    log.info(
        "worker %s consuming %s (%s) at %s, %d at once",
        consumer.worker_id,
        args.queue,
        args.source,
        where,
        consumer.concurrency,
    )
    try:
        await consumer.run()
    except Exception:
        log.exception("worker %s stopped on an error", consumer.worker_id)
        return EXIT_REFUSED
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        with contextlib.suppress(Exception):
            await conn.aclose()
    log.info("worker %s drained and stopped", consumer.worker_id)
    return 0


if __name__ == "__main__":
    main()
