"""A fork server for the chaos suite: pays Python's import cost once, forks workers in ~ms.

    python -m tests.chaos.zygote        # stdin: one JSON command a line; stdout: replies

A kill storm respawns a worker every second or so; starting ``python -c run_worker`` costs
~1.2 s of CPU in imports alone, which on a 2-core runner would starve the very workers under
test. So the zygote imports everything once and forks: each child is a real, separate
process (its own pid, sockets, event loop and SQLite connections, SIGKILLable), exactly the
code ``codemojex worker`` runs, minus the imports.

Commands (stdin)::

    {"role": "score_worker" | "consumer", "worker_id": ..., "env": {...}, "log": path,
     "args": {...}}                       -> "pid <pid>"

Notifications (stdout)::

    "exit <pid> <code>"      code as Popen.returncode: -9 for SIGKILL, 0 for a clean exit

A child applies ``env`` to its environment (``CODEMOJEX_*``: ``Config.from_env`` reads it),
re-reads its crash points, sends stdout/stderr to ``log``, and dies with the zygote
(PR_SET_PDEATHSIG), which itself dies with the test process.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import select
import signal
import sys
import traceback
from typing import Any

# The imports a worker needs, done once, before any fork.
import codemojex.logs
import codemojex.worker
from codemojex import crashpoints
from codemojex.config import Config
from codemojex.zygote import reaped
from tests.chaos import proc_consumer

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int, sig: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _child(cmd: dict[str, Any], zygote: int) -> None:
    code = 1
    try:
        _die_with(zygote, int(signal.SIGKILL))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        out = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ.update(cmd.get("env", {}))
        crashpoints.reload()
        # Info and up, timestamped, as `codemojex worker` logs: a failed run's log then
        # says when each worker began and ended a wait, not only that it began one.
        codemojex.logs.configure("info")
        if cmd["role"] == "score_worker":
            asyncio.run(codemojex.worker.run_worker(Config.from_env(), cmd["worker_id"]))
        elif cmd["role"] == "consumer":
            asyncio.run(proc_consumer.run(cmd["worker_id"], **cmd.get("args", {})))
        else:
            raise ValueError(f"unknown role {cmd['role']!r}")
        code = 0
    except BaseException:  # noqa: BLE001 - report anything, then leave without cleanup
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reply(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _reap() -> None:
    for pid, code in reaped():
        _reply(f"exit {pid} {code}")


def main() -> None:
    me = os.getpid()
    _reply("ready")
    stdin = sys.stdin.buffer
    buf = b""
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.02)
        _reap()
        if not ready:
            continue
        chunk = os.read(stdin.fileno(), 65536)
        if not chunk:
            return  # the test process is gone: children die with us (PDEATHSIG)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            cmd = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(cmd, me)
            _reply(f"pid {pid}")


if __name__ == "__main__":
    main()
