"""The fork server of ``codemojex up`` (codemojex/zygote.py): a fork runs exactly the command
and the environment it was ordered with, reports its end as ``Popen`` would, dies with the
zygote as the zygote dies with its parent; and under ``up`` every web server and worker,
replacements included, is one of its forks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from codemojex.zygote import Zygote, ZygoteGone, forkable
from harness.procs import proc_parent
from harness.running import Up, cmdline, is_running, wait_until
from tests.cli.test_up import client, heartbeating_workers

ME = [sys.executable, "-m", "codemojex"]
# A worker that never gets anywhere (nothing listens on port 1): it retries until signalled.
STUCK_WORKER = [*ME, "worker", "--valkey-url", "redis://127.0.0.1:1/0"]


def clean_env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")} | extra


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote.start(clean_env(CODEMOJEX_ROUND_SECONDS="not a number"))
    try:
        yield z
    finally:
        z.close()


def test_a_fork_has_the_environment_it_was_given_not_the_zygotes(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The zygote's environment holds a bad CODEMOJEX_ROUND_SECONDS: a fork given a clean one
    migrates (exit 0); a fork given the bad one refuses it as the command would (exit 2)."""
    db = f"sqlite:///{tmp_path / 'z.db'}"
    fine = zygote.spawn([*ME, "migrate", "--database-url", db], clean_env())
    assert fine.wait(60) == 0
    bad = zygote.spawn(
        [*ME, "migrate", "--database-url", db], clean_env(CODEMOJEX_ROUND_SECONDS="x")
    )
    assert bad.wait(60) == 2


def test_a_fork_reads_as_its_command_and_ends_as_popen_reports(zygote: Zygote) -> None:
    child = zygote.spawn(STUCK_WORKER, clean_env())
    wait_until(lambda: "worker" in cmdline(child.pid), 10, "the fork's command line")
    argv = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
    assert [a.decode() for a in argv[: len(STUCK_WORKER)]] == STUCK_WORKER
    assert proc_parent(child.pid) == zygote.proc.pid
    assert os.getpgid(child.pid) == child.pid  # its own group: a terminal's Ctrl-C is ours
    assert child.poll() is None
    child.kill()
    assert child.wait(10) == -signal.SIGKILL
    assert child.poll() == child.returncode == -signal.SIGKILL
    usage = zygote.spawn([*ME, "no-such-command"], clean_env())
    assert usage.wait(30) == 2
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.spawn(STUCK_WORKER, clean_env()).wait(0.2)


def test_forks_die_with_the_zygote_and_a_gone_zygote_takes_no_orders(zygote: Zygote) -> None:
    child = zygote.spawn(STUCK_WORKER, clean_env())
    os.kill(zygote.proc.pid, signal.SIGKILL)
    # PDEATHSIG: the kernel SIGTERMs the fork; init reaps it, so SIGTERM is what we report.
    assert child.wait(20) == -signal.SIGTERM
    assert not is_running(child.pid)
    with pytest.raises(ZygoteGone):
        zygote.spawn(STUCK_WORKER, clean_env())


def test_only_this_interpreters_codemojex_commands_are_forked() -> None:
    assert forkable([*ME, "web"])
    assert not forkable(["/usr/bin/python3", "-m", "codemojex", "web"]) or (
        sys.executable == "/usr/bin/python3"
    )
    assert not forkable([sys.executable, "-m", "somethingelse"])
    assert not forkable(["valkey-server", "conf"])


def fork_server_of(up: Up) -> int:
    (pid,) = (p for p in up.track() if "-m codemojex.zygote" in cmdline(p))
    return pid


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_up_forks_its_web_server_its_workers_and_their_replacements(
    start_up: Callable[..., Up],
) -> None:
    up = start_up("--workers", "2")
    zygote = fork_server_of(up)
    assert proc_parent(zygote) == up.proc.pid  # type: ignore[union-attr]
    (web,) = up.web_pids()
    assert proc_parent(web) == zygote
    with client(up) as http:
        workers = heartbeating_workers(http, up, 2, 15)
        pids = {cast(int, w["pid"]) for w in workers.values()}
        for pid in pids:
            assert proc_parent(pid) == zygote, cmdline(pid)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        again = heartbeating_workers(http, up, 2, 20, without=victim)
        for info in again.values():
            assert proc_parent(cast(int, info["pid"])) == zygote
    assert up.stop() == 0
    assert not is_running(zygote)
    assert not up.leftovers()
