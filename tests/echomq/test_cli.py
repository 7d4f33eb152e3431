"""``echomq stats|dead|retry|workers|worker`` against the session's real Valkey.

Most calls run ``echomq.cli.main`` in a thread of this process (its own event loop, this
test's output captured); the unreachable-server, entry-point and running ``worker`` tests
run the command as a child process, as an operator would (a worker's signal handlers need
its main thread).

One ``worker`` case runs against the session's Valkey Cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

import echomq
import echomq.registry
from echomq import cli
from harness.cluster import ValkeyCluster
from harness.helpers import free_port

PASSWORD = "hunter2hunter2"


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")  # rich folds a table to 80 columns off a terminal
    monkeypatch.delenv(cli.URL_VARIABLE, raising=False)


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        else:  # main always exits
            raise AssertionError("cli.main returned")
    return code, out.getvalue(), err.getvalue()


async def echomq_cli(*argv: str) -> tuple[int, str, str]:
    """``echomq ARGV…``: (exit status, stdout, stderr)."""
    return await asyncio.to_thread(_main, list(argv))


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def dead_job(q: echomq.Queue, lane: str, payload: Any, error: str) -> str:
    job_id = await q.lanes.enqueue(lane, payload, max_attempts=1)
    claim = await q.lanes.claim("WRK_test", 10_000)
    assert claim is not None and claim.job_id == job_id
    assert await q.jobs.fail(job_id, claim.token, error) == "dead"
    return job_id


async def test_stats_says_where_the_jobs_are(q: echomq.Queue, valkey_url: str) -> None:
    for lane in ("alice", "alice", "bob"):
        await q.lanes.enqueue(lane, {"from": lane})
    await q.jobs.enqueue({"plain": True})
    await q.jobs.enqueue({"later": True}, delay_ms=60_000)
    held = await q.jobs.claim("WRK_test", 10_000)
    assert held is not None

    code, out, err = await echomq_cli("stats", "--url", valkey_url, "--json", q.name)
    assert (code, err) == (0, "")
    stats = json.loads(out)
    assert {k: stats[k] for k in ("pending", "active", "scheduled", "completed", "dead")} == {
        "pending": 3,
        "active": 1,
        "scheduled": 1,
        "completed": 0,
        "dead": 0,
    }
    assert stats["lanes"] == {"alice": 2, "bob": 1} and stats["lane_count"] == 2
    assert stats["counters"]["enqueued"] == 5

    code, out, err = await echomq_cli("stats", "--url", valkey_url, "--lanes", "1", q.name)
    assert (code, err) == (0, "")
    assert f"queue {q.name}" in out and "pending" in out and "scheduled" in out
    assert "(1 of 2)" in out and "alice" in out and "bob" not in out  # one lane listed
    assert "enqueued" in out


async def test_dead_lists_dead_jobs_oldest_first_with_their_reason(
    q: echomq.Queue, valkey_url: str
) -> None:
    first = await dead_job(q, "alice", {"n": 1}, "boom one")
    second = await dead_job(q, "bob", {"n": 2, "[red]markup[/red]": "x" * 100}, "boom two")

    code, out, err = await echomq_cli("dead", "--url", valkey_url, "--json", q.name)
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [r["job_id"] for r in rows] == [first, second]
    assert rows[0]["state"] == "dead" and rows[0]["error"] == "boom one"
    assert rows[0]["lane"] == "alice" and rows[0]["payload"] == {"n": 1}
    assert rows[0]["reason"]  # why it died, as the script recorded it

    code, out, err = await echomq_cli("dead", "--url", valkey_url, "--limit", "1", q.name)
    assert (code, err) == (0, "")
    assert "(1 of 2)" in out and first in out and second not in out and "boom one" in out

    code, out, _ = await echomq_cli("dead", "--url", valkey_url, q.name)
    assert code == 0 and "[red]markup[/red]" in out  # payload text shown, never as markup
    assert "…" in out  # a long payload is cut in the table


async def test_retry_puts_a_dead_job_back_on_its_lane_once(
    q: echomq.Queue, valkey_url: str
) -> None:
    job_id = await dead_job(q, "alice", {"n": 1}, "boom")

    code, out, err = await echomq_cli("retry", "--url", valkey_url, q.name, job_id)
    assert (code, err) == (0, "")
    assert f"{job_id} is back on lane alice (pending)" in out
    info = await q.jobs.get(job_id)
    assert info is not None and info.state == "pending"
    assert (await q.stats())["lanes"] == {"alice": 1}

    # Not dead any more: refused in one line, exit 1, nothing changed.
    code, out, err = await echomq_cli("retry", "--url", valkey_url, "--json", q.name, job_id)
    assert (code, out) == (1, "")
    assert err == f"echomq: {job_id} is not dead\n"
    assert (await q.stats())["lanes"] == {"alice": 1}

    code, out, err = await echomq_cli("retry", "--url", valkey_url, q.name, "JOB_nosuchjob")
    assert code == 1 and out == "" and err.startswith("echomq: ") and err.count("\n") == 1


async def test_retry_json_names_the_job_and_its_state(q: echomq.Queue, valkey_url: str) -> None:
    job_id = await dead_job(q, "bob", {"n": 1}, "boom")
    code, out, err = await echomq_cli("retry", "--url", valkey_url, "--json", q.name, job_id)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"job_id": job_id, "retried": True, "state": "pending"}


@pytest.fixture
async def consumer(q: echomq.Queue) -> AsyncIterator[echomq.Consumer]:
    """A real Consumer on ``q`` whose handler holds each job until ``release`` is set."""
    release = asyncio.Event()

    async def handler(claim: echomq.Claim) -> None:
        await release.wait()

    c = echomq.Consumer(q, handler, lease_ms=10_000, heartbeat_ms=100, worker_id="WRK_cli")
    task = asyncio.create_task(c.run())
    yield c
    release.set()
    c.stop()
    await asyncio.wait_for(task, 20)


async def test_workers_lists_a_running_consumer_and_the_job_it_holds(
    q: echomq.Queue, valkey_url: str, consumer: echomq.Consumer
) -> None:
    job_id = await q.lanes.enqueue("alice", {"n": 1})

    async def holding() -> bool:
        rows = await echomq.registry.workers(q)
        return bool(rows) and rows[0].jobs == (job_id,)

    await wait_for(holding)
    code, out, err = await echomq_cli("workers", "--url", valkey_url, "--json", q.name)
    assert (code, err) == (0, "")
    got = json.loads(out)
    (row,) = got["workers"]
    assert row["worker_id"] == "WRK_cli" and row["alive"] is True
    assert row["state"] == "busy" and row["jobs"] == [job_id]
    assert row["pid"] == os.getpid() and row["host"]
    assert row["deadline_ms"] > got["server_now_ms"]  # its heartbeat is not yet due

    code, out, err = await echomq_cli("workers", "--url", valkey_url, q.name)
    assert (code, err) == (0, "")
    assert "WRK_cli" in out and "busy" in out and job_id in out and str(os.getpid()) in out


async def test_workers_of_a_queue_without_any(q: echomq.Queue, valkey_url: str) -> None:
    code, out, err = await echomq_cli("workers", "--url", valkey_url, "--json", q.name)
    assert (code, err) == (0, "")
    assert json.loads(out)["workers"] == []


def test_an_unreachable_server_is_one_line_and_exit_2_from_the_command() -> None:
    port = free_port()  # nobody listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "echomq.cli",
            "stats",
            "--url",
            f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
            "q",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith(f"echomq: cannot reach Valkey at redis://:***@127.0.0.1:{port}/0")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr


async def test_every_command_says_an_unreachable_server_in_one_line() -> None:
    port = free_port()
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    for command in (["stats", "q"], ["dead", "q"], ["retry", "q", "JOB_x"], ["workers", "q"]):
        code, out, err = await echomq_cli(*command, "--url", url, "--json")
        assert (code, out) == (2, ""), command
        assert err.startswith(f"echomq: cannot reach Valkey at redis://:***@127.0.0.1:{port}/0")
        assert err.count("\n") == 1 and PASSWORD not in err


async def test_every_command_says_an_unreachable_cluster_in_one_line() -> None:
    port = free_port()  # a cluster none of whose seeds answers
    url = f"redis+cluster://:{PASSWORD}@127.0.0.1:{port}/0"
    for command in (["stats", "q"], ["dead", "q"], ["retry", "q", "JOB_x"], ["workers", "q"]):
        code, out, err = await echomq_cli(*command, "--url", url, "--json")
        assert (code, out) == (2, ""), command
        assert err.startswith(
            f"echomq: cannot reach Valkey at redis+cluster://:***@127.0.0.1:{port}/0"
        )
        assert err.count("\n") == 1 and "Traceback" not in err and PASSWORD not in err


async def test_the_url_comes_from_echomq_url_when_not_given(
    valkey_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cli.URL_VARIABLE, valkey_url)
    code, out, err = await echomq_cli("stats", "--json", "nothing-here")
    assert (code, err) == (0, "")
    assert json.loads(out)["pending"] == 0
    port = free_port()
    monkeypatch.setenv(cli.URL_VARIABLE, f"redis://127.0.0.1:{port}/0")
    code, _, err = await echomq_cli("stats", "nothing-here")
    assert code == 2 and f"127.0.0.1:{port}" in err
    monkeypatch.delenv(cli.URL_VARIABLE)
    code, _, err = await echomq_cli("stats", "nothing-here")  # the default, 6379
    if code != 0:  # (a server of the machine's own on 6379 may answer instead)
        assert err.startswith(f"echomq: cannot reach Valkey at {cli.DEFAULT_URL}: "), err


async def test_a_bad_command_line_is_one_line_and_exit_2(valkey_url: str) -> None:
    for argv in (
        ["dead", "--url", valkey_url, "--limit", "0", "q"],
        ["stats", "--url", valkey_url],  # no queue
        ["frobnicate", "q"],
        ["stats", "--url", "http://example.invalid/", "q"],
    ):
        code, out, err = await echomq_cli(*argv)
        assert code == 2 and out == "", argv
        assert err.startswith("echomq") and err.count("\n") == 1, err


async def test_a_partitioned_queue_is_read_across_its_partitions(
    redis_conn: Any, queue_name: str, valkey_url: str
) -> None:
    p = echomq.Partitioned(redis_conn, queue_name, 3)
    doomed: dict[str, str] = {}  # partition -> a lane of it
    for i in range(100):
        doomed.setdefault(p.of_lane(f"doomed{i}").name, f"doomed{i}")
    assert len(doomed) == 3  # the lanes spread over every partition
    dead = [
        await dead_job(p.of_lane(lane), lane, {"n": lane}, f"boom {lane}")
        for lane in doomed.values()
    ]
    for i in range(12):
        await p.enqueue(f"player{i}", {"n": i})
    await p.partitions[-1].heartbeat("WRK_p", 3_000, {"pid": 7})
    flags = ["--url", valkey_url, "--partitions", "3", "--json"]

    code, out, err = await echomq_cli("stats", *flags, queue_name)
    assert (code, err) == (0, "")
    stats = json.loads(out)
    assert stats["pending"] == 12 and stats["dead"] == len(dead)
    assert len(stats["partitions"]) == 3

    code, out, err = await echomq_cli("dead", *flags, queue_name)
    assert (code, err) == (0, "")
    assert [r["job_id"] for r in json.loads(out)] == dead  # oldest death first, all of them

    code, out, err = await echomq_cli("retry", *flags, queue_name, dead[-1])
    assert (code, err) == (0, "")
    assert json.loads(out)["state"] == "pending"
    code, _, err = await echomq_cli("retry", *flags, queue_name, "JOB_nosuchjob")
    assert code == 1 and err == f"echomq: no job JOB_nosuchjob in queue {queue_name}\n"

    code, out, err = await echomq_cli("workers", *flags, queue_name)
    assert (code, err) == (0, "")
    assert [w["worker_id"] for w in json.loads(out)["workers"]] == ["WRK_p"]

    # Without --partitions the name is one plain queue, which holds nothing here.
    code, out, _ = await echomq_cli("stats", "--url", valkey_url, "--json", queue_name)
    assert code == 0 and json.loads(out)["pending"] == 0


async def test_version_and_help_name_the_commands() -> None:
    code, out, err = await echomq_cli("--version")
    assert (code, out, err) == (0, f"echomq {echomq.__version__}\n", "")
    code, out, _ = await echomq_cli("--help")
    assert code == 0
    for command in ("stats", "dead", "retry", "workers"):
        assert command in out
    code, out, _ = await echomq_cli("dead", "--help")
    assert code == 0 and "--limit" in out and "--url" in out and cli.URL_VARIABLE in out


# -- echomq worker: a Consumer from the command line, run as an operator would ---------------

HANDLERS = """
import asyncio

import echomq

NOT_CALLABLE = 42


def plain(claim):
    return None


async def echo(claim: echomq.Claim):
    if claim.payload.get("slow"):
        with open(claim.payload["started"], "w"):  # the test signals only a running job
            pass
        await asyncio.sleep(claim.payload["slow"])
    return {"echo": claim.payload, "lane": claim.lane}


class Nested:
    @staticmethod
    async def handle(claim: echomq.Claim):
        return "nested"
"""


@pytest.fixture
def app_dir(tmp_path: Any) -> str:
    (tmp_path / "cli_handlers.py").write_text(HANDLERS, encoding="utf-8")
    (tmp_path / "cli_broken.py").write_text("raise RuntimeError('boom at import')\n")
    return str(tmp_path)


def worker_process(app_dir: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "worker", "--app-dir", app_dir, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != cli.URL_VARIABLE},
    )


async def finished(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    _, err = await asyncio.to_thread(proc.communicate, timeout=timeout)
    return proc.returncode, err


@contextlib.contextmanager
def running_worker(app_dir: str, *argv: str) -> Iterator[subprocess.Popen[str]]:
    """``echomq worker ARGV…`` as a child process, killed if a test leaves it running."""
    proc = worker_process(app_dir, *argv)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def stopped_cleanly(proc: subprocess.Popen[str], sig: signal.Signals) -> str:
    """Send ``sig``; the worker drains and exits 0. Returns its stderr."""
    proc.send_signal(sig)
    code, err = await finished(proc)
    assert code == 0, err
    assert "Traceback" not in err
    return err


async def completed(get: Callable[[str], Awaitable[Any]], ids: list[str]) -> bool:
    for job_id in ids:
        info = await get(job_id)
        if info is None or info.state != "completed":
            return False
    return True


async def test_worker_handles_the_jobs_enqueued_and_drains_on_sigterm(
    q: echomq.Queue, valkey_url: str, app_dir: str
) -> None:
    plain = [await q.jobs.enqueue({"n": n}) for n in range(3)]
    argv = ("--url", valkey_url, "--queue", q.name, "--source", "jobs", "--concurrency", "2")
    with running_worker(app_dir, *argv, "--lease-ms", "5000", "cli_handlers:echo") as proc:
        await wait_for(lambda: completed(q.jobs.get, plain), timeout=30)
        info = await q.jobs.get(plain[0])
        assert info is not None and info.result == {"echo": {"n": 0}, "lane": None}
        found = await echomq.registry.workers(q)
        assert len(found) == 1 and found[0].pid == proc.pid

        # A job whose handler is running at SIGTERM is finished (drained), not abandoned.
        started = os.path.join(app_dir, "started")
        slow = await q.jobs.enqueue({"slow": 1.0, "started": started})

        async def running() -> bool:
            return os.path.exists(started)

        await wait_for(running, timeout=30)
        await stopped_cleanly(proc, signal.SIGTERM)
        info = await q.jobs.get(slow)
        assert info is not None and info.state == "completed"
        assert info.result == {"echo": {"slow": 1.0, "started": started}, "lane": None}
        assert await echomq.registry.workers(q) == []  # it left the registry


async def test_worker_serves_fair_lanes_by_default_with_a_dotted_handler(
    q: echomq.Queue, valkey_url: str, app_dir: str
) -> None:
    job_id = await q.lanes.enqueue("alice", {"n": 1})
    argv = ("--url", valkey_url, "--queue", q.name, "cli_handlers:Nested.handle")
    with running_worker(app_dir, *argv) as proc:
        await wait_for(lambda: completed(q.jobs.get, [job_id]), timeout=30)
        info = await q.jobs.get(job_id)
        assert info is not None and info.result == "nested"
        await stopped_cleanly(proc, signal.SIGINT)


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("cli_handlers", "HANDLER must be pkg.module:attr, got 'cli_handlers'"),
        ("cli_handlers:", "HANDLER must be pkg.module:attr"),
        ("no_such_module_here:handle", "cannot import no_such_module_here: ModuleNotFoundError"),
        ("cli_broken:handle", "cannot import cli_broken: RuntimeError: boom at import"),
        ("cli_handlers:missing", "cli_handlers has no attribute missing"),
        ("cli_handlers:Nested.missing", "cli_handlers has no attribute Nested.missing"),
        ("cli_handlers:NOT_CALLABLE", "cli_handlers:NOT_CALLABLE is not callable (it is a int)"),
        ("cli_handlers:plain", "cli_handlers:plain is not async"),
    ],
)
async def test_worker_refuses_a_bad_handler_in_one_line_exit_2(
    valkey_url: str, app_dir: str, target: str, said: str
) -> None:
    proc = worker_process(app_dir, "--url", valkey_url, "--queue", "q", target)
    code, err = await finished(proc)
    assert code == 2
    assert err.startswith(f"echomq: {said}"), err
    assert err.count("\n") == 1 and "Traceback" not in err


async def test_worker_refuses_options_the_consumer_refuses(valkey_url: str, app_dir: str) -> None:
    for argv in (
        ["--lease-ms", "50"],  # argparse: below the lease's floor
        ["--concurrency", "0"],
        ["--source", "elsewhere"],
        ["--worker-id", ""],  # the Consumer's own check
        ["--lapse-ms", "5", "--lease-ms", "1000"],  # a beat cannot land inside that lapse
    ):
        code, out, err = await echomq_cli(
            "worker", "--url", valkey_url, "--queue", "q", *argv, "tests.echomq.test_cli:noop"
        )
        assert code == 2 and out == "", argv
        assert err.startswith("echomq") and err.count("\n") == 1 and "Traceback" not in err, err


async def noop(claim: echomq.Claim) -> None:
    """A handler the in-process worker tests name."""


async def test_worker_help_names_its_options() -> None:
    code, out, _ = await echomq_cli("worker", "--help")
    assert code == 0
    for option in ("--url", "--queue", "--concurrency", "--lease-ms", "--source", "HANDLER"):
        assert option in out
    assert cli.URL_VARIABLE in out


def test_the_worker_flags_default_to_the_consumers_own_defaults() -> None:
    from dataclasses import fields

    from echomq.consumer.options import ConsumerOptions

    defaults = {f.name: f.default for f in fields(ConsumerOptions) if f.init}
    for flag, _, default, _ in cli.WORKER_NUMBERS:
        assert defaults[flag[2:].replace("-", "_")] == default, flag


async def test_worker_consumes_every_partition_of_a_partitioned_queue(
    redis_conn: Any, queue_name: str, valkey_url: str, app_dir: str
) -> None:
    p = echomq.Partitioned(redis_conn, queue_name, 3)
    ids = [await p.enqueue(f"player{i}", {"n": i}) for i in range(40)]
    assert len({p.of_lane(f"player{i}").name for i in range(40)}) == 3  # every partition
    argv = ("--url", valkey_url, "--queue", queue_name, "--partitions", "3", "--concurrency", "3")
    with running_worker(app_dir, *argv, "cli_handlers:echo") as proc:
        await wait_for(lambda: completed(p.get, ids), timeout=30)
        await stopped_cleanly(proc, signal.SIGTERM)


WHOAMI = """
import asyncio
import os


async def whoami(claim):
    if claim.payload.get("slow"):
        with open(claim.payload["started"], "w"):
            pass
        await asyncio.sleep(claim.payload["slow"])
    return {"pid": os.getpid(), "lane": claim.lane, "n": claim.payload.get("n")}
"""


@pytest.fixture
def whoami_dir(app_dir: str) -> str:
    """``app_dir`` with ``cli_whoami:whoami``, a handler whose result names the process that
    ran it (a finished job's row no longer names its worker)."""
    with open(os.path.join(app_dir, "cli_whoami.py"), "w", encoding="utf-8") as f:
        f.write(WHOAMI)
    return app_dir


@pytest.mark.parametrize("valkey_backend", ["cluster"], indirect=True)
async def test_worker_on_a_valkey_cluster_serves_lanes_and_the_plain_queue(
    q: echomq.Queue, valkey_cluster: ValkeyCluster, whoami_dir: str
) -> None:
    app_dir = whoami_dir
    # The scheme marks the cluster (the harness's own URL marks it in the query instead).
    url = f"redis+cluster://127.0.0.1:{valkey_cluster.ports[0]}/0"
    laned = [await q.lanes.enqueue(lane, {"n": n}) for n in range(3) for lane in ("alice", "bob")]
    plain = [await q.jobs.enqueue({"n": n}) for n in range(3)]
    argv = ("--url", url, "--queue", q.name, "--concurrency", "2", "cli_whoami:whoami")
    with (
        running_worker(app_dir, "--source", "lanes", *argv) as lanes_proc,
        running_worker(app_dir, "--source", "jobs", *argv) as jobs_proc,
    ):
        await wait_for(lambda: completed(q.jobs.get, [*laned, *plain]), timeout=30)
        found = await echomq.registry.workers(q)
        assert len(found) == 2 and {w.pid for w in found} == {lanes_proc.pid, jobs_proc.pid}
        lanes: set[str | None] = set()
        for ids, pid in ((laned, lanes_proc.pid), (plain, jobs_proc.pid)):
            for job_id in ids:  # each source served by the worker claiming from it
                info = await q.jobs.get(job_id)
                assert info is not None and info.result["pid"] == pid
                assert info.result["lane"] == info.lane and info.result["n"] == info.payload["n"]
                lanes.add(info.lane)
        assert lanes == {"alice", "bob", None}

        # Enqueued while both workers are parked: a delayed plain job runs once it is due.
        later = await q.jobs.enqueue({"n": -1}, delay_ms=500)
        await wait_for(lambda: completed(q.jobs.get, [later]), timeout=30)
        info = await q.jobs.get(later)
        assert info is not None and info.finished_at_ms is not None
        assert info.finished_at_ms >= info.enqueued_at_ms + 500  # never before its time
        assert info.result == {"pid": jobs_proc.pid, "lane": None, "n": -1}

        # A lane job whose handler is running at SIGTERM is finished (drained), not abandoned.
        started = os.path.join(app_dir, "started")
        slow = await q.lanes.enqueue("carol", {"slow": 1.0, "started": started, "n": 7})

        async def running() -> bool:
            return os.path.exists(started)

        await wait_for(running, timeout=30)
        err = await stopped_cleanly(lanes_proc, signal.SIGTERM)
        assert f"at {url}" in err and "drained and stopped" in err
        info = await q.jobs.get(slow)
        assert info is not None and info.state == "completed"
        assert info.result == {"pid": lanes_proc.pid, "lane": "carol", "n": 7}
        await stopped_cleanly(jobs_proc, signal.SIGTERM)
        assert await echomq.registry.workers(q) == []  # both left the registry
