"""The fork server of ``codemojex up``: imports the web and worker stack once, forks children.

Started by the supervisor as ``python -m codemojex.zygote FD PADDING`` with the children's
shared environment; ``FD`` is its end of a socketpair, one JSON object or word a line:

    supervisor -> zygote   {"argv": [python, "-m", "codemojex", "web", ...], "env": {...}}
    zygote -> supervisor   "ready" once, then "pid <pid>" for each order (in order) and
                           "exit <pid> <code>" as each child ends (code as
                           ``Popen.returncode``: -9 for SIGKILL)

A ``codemojex web`` or ``worker`` started with ``python -m`` spends about 1.5 s of CPU
importing SQLAlchemy, redis-py, Starlette and the rest before it does anything; a replacement
for a killed worker paid that again, on the machine whose CPU the game is using. A fork of
this process has it all imported: it sets the environment it was given, its command line
(``/proc/<pid>/cmdline``, what ``ps`` shows) to the command it stands for, and runs
``codemojex.cli.main`` on the same arguments, exactly what the command would have run.

Each child is in its own process group and gets SIGTERM when the zygote dies
(``PR_SET_PDEATHSIG``); the zygote gets SIGTERM when the supervisor dies, so a SIGKILLed
``up`` still leaves nothing behind. The zygote stays single-threaded, with no event loop and
no connection open, so that forking it is safe.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

# What a child would import on its way to serving: the heavy part of its start.
PRELOAD = (
    "codemojex.cli",
    "codemojex.logs",
    "codemojex.store",
    "codemojex.worker",
    "web.app",
    "web.server",
    "uvicorn",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvloop",
)
# The command lines the children take are written in this process's argv area (the
# environment's area is left alone: /proc/<pid>/environ still says what a child was started
# with); the supervisor passes a blank argument this long to make room for them.
TITLE_ROOM = 4096
_PR_SET_PDEATHSIG = 1


def _prctl_pdeathsig(sig: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def _stat(pid: int | str) -> list[str] | None:
    """``/proc/<pid>/stat`` from field 3 (state) on, see proc(5); None once it is gone. The
    command name is skipped by its last ``)``: it may hold spaces and parentheses."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _retitle(argv: Sequence[str]) -> None:
    """Make ``/proc/self/cmdline`` read ``argv``, NUL-separated as after an exec (``ps``,
    psutil and pgrep see the command), by writing over the original argument strings, which
    CPython copied at start and never reads again. setproctitle would write one string, and
    over the environment's area too."""
    fields = _stat("self")
    if fields is None:
        return
    start, end = int(fields[48 - 3]), int(fields[49 - 3])  # arg_start, arg_end
    room = end - start
    data = b"\0".join(a.encode() for a in argv) + b"\0"
    if not 0 < room <= 1 << 20:  # not the argument area this code knows: leave it
        return
    if len(data) > room:
        data = data[: room - 1] + b"\0"
    elif len(data) < room:
        # The rest is one blank argument, as the zygote's own: all NULs would read as
        # thousands of empty ones (psutil), and a last byte that is not a NUL makes the
        # kernel read the area as one string (the setproctitle convention).
        data += b" " * (room - len(data) - 1) + b"\0"
    ctypes.memmove(start, data, room)


def reaped() -> Iterator[tuple[int, int]]:
    """(pid, exit code as ``Popen.returncode``) of each child that has ended, reaping it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


class _Server:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.me = os.getpid()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        # A handler (not SIG_DFL) so SIGCHLD interrupts select through the wakeup fd.
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop

    def say(self, line: str) -> None:
        self.control.sendall(line.encode() + b"\n")

    def reap(self) -> None:
        for pid, code in reaped():
            self.say(f"exit {pid} {code}")

    def serve(self) -> dict[str, Any] | None:
        """Fork on each order. Returns the order in the child; None in the zygote at EOF."""
        buf = b""
        self.say("ready")
        while True:
            with contextlib.suppress(InterruptedError):
                select.select([self.control.fileno(), self.wake_r], [], [])
            with contextlib.suppress(BlockingIOError):
                os.read(self.wake_r, 4096)
            self.reap()
            try:
                chunk = self.control.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            if not chunk:
                return None  # the supervisor is done with us (or gone)
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                order = json.loads(line)
                # What is here now stays for the child's life: out of its collector's sight,
                # a collection (and the child's exit) does not write to the pages it shares
                # with us. Without it a child's exit alone cost about 0.6 s of CPU, copying
                # every page of the imported stack.
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    self._become_child()
                    return dict(order)
                self.say(f"pid {pid}")

    def _become_child(self) -> None:
        signal.set_wakeup_fd(-1)
        # As in a new interpreter: Ctrl-C raises KeyboardInterrupt, the rest are the OS's.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        _prctl_pdeathsig(int(signal.SIGTERM))
        if os.getppid() != self.me:  # the zygote died between fork and prctl
            os._exit(1)
        os.setpgid(0, 0)


def _run_child(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Become ``argv`` (``python -m codemojex ...``): its environment, title and arguments."""
    os.environ.clear()
    os.environ.update(env)
    from codemojex import crashpoints

    crashpoints.reload()  # read at import, from the zygote's environment
    _retitle(argv)
    import codemojex.__main__
    from codemojex.cli import main as codemojex_main

    sys.argv = [str(codemojex.__main__.__file__), *argv[3:]]
    codemojex_main(list(argv[3:]))


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    _retitle([sys.executable, "-m", "codemojex.zygote", sys.argv[1], sys.argv[2]])
    order = _Server(control).serve()
    if order is not None:
        _run_child(order["argv"], order["env"])


# -- the supervisor's end -----------------------------------------------------------------------

READY_TIMEOUT_S = 30.0
ORDER_TIMEOUT_S = 10.0


class ZygoteGone(Exception):
    """The fork server did not start, or stopped answering."""


class Process(Protocol):
    """What the supervisor needs of a child: ``subprocess.Popen`` and :class:`Forked` both."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def forkable(argv: Sequence[str]) -> bool:
    """Only ``python -m codemojex ...`` of this interpreter: what a fork of us can become."""
    return sys.platform.startswith("linux") and list(argv[:3]) == [
        sys.executable,
        "-m",
        "codemojex",
    ]


class Zygote:
    """The supervisor's handle on its fork server (start with :meth:`start`)."""

    def __init__(self, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        self.proc = proc
        self.control = control
        self.gone = False
        self._buf = b""
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}

    @classmethod
    def start(cls, env: Mapping[str, str], timeout: float = READY_TIMEOUT_S) -> Zygote:
        from echomq.server import die_with_parent

        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "codemojex.zygote", str(theirs.fileno()), " " * TITLE_ROOM],
                env=dict(env),
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                process_group=0,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl only
            )
        except OSError as e:
            ours.close()
            raise ZygoteGone(f"cannot start: {e}") from None
        finally:
            theirs.close()
        zygote = cls(proc, ours)
        deadline = time.monotonic() + timeout
        try:
            while "ready" not in zygote._lines(deadline):
                if time.monotonic() >= deadline:
                    raise ZygoteGone(f"not ready within {timeout:g} s")
        except ZygoteGone:
            zygote._lost(kill=True)
            raise
        return zygote

    def spawn(self, argv: Sequence[str], env: Mapping[str, str]) -> Forked:
        """A fork that runs ``argv`` with exactly ``env``."""
        if self.gone:
            raise ZygoteGone("the fork server is gone")
        try:
            self.control.sendall(
                json.dumps({"argv": list(argv), "env": dict(env)}).encode() + b"\n"
            )
        except OSError as e:
            self._lost()
            raise ZygoteGone(f"cannot send an order: {e}") from None
        deadline = time.monotonic() + ORDER_TIMEOUT_S
        while not self._pids:
            if not self._lines(deadline) and time.monotonic() >= deadline:
                self._lost(kill=True)
                raise ZygoteGone(f"no pid within {ORDER_TIMEOUT_S:g} s")
        pid = self._pids.pop(0)
        return Forked(self, pid)

    def returncode(self, pid: int, wait_s: float = 0.0) -> int | None:
        """The child's exit code once known, reading what the zygote said for up to ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while pid not in self._exits:
            if self.gone:
                return self._orphan_code(pid)
            try:
                said = self._lines(deadline)
            except ZygoteGone:
                continue  # gone: the next turn asks the kernel instead
            if not said and time.monotonic() >= deadline:
                return None
        return self._exits[pid]

    def close(self, timeout: float = 5.0) -> None:
        """Tell the zygote to go (end of its orders) and reap it."""
        with contextlib.suppress(OSError):
            self.control.shutdown(socket.SHUT_WR)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.control.close()
        self.gone = True

    # -- reading ------------------------------------------------------------------------------

    def _lines(self, deadline: float) -> list[str]:
        """The lines the zygote sent, waiting until ``deadline`` for one ([] if none came),
        with the pids and exits in them recorded; ZygoteGone once it is gone."""
        while b"\n" not in self._buf:
            if self.gone:
                raise ZygoteGone("the fork server is gone")
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.control], [], [], left)
            if not ready:
                return []
            try:
                chunk = self.control.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._lost()
                raise ZygoteGone(f"the fork server exited {self.proc.poll()}")
            self._buf += chunk
        *complete, self._buf = self._buf.split(b"\n")
        lines = [c.decode() for c in complete]
        for line in lines:
            word, *rest = line.split()
            if word == "pid":
                self._pids.append(int(rest[0]))
            elif word == "exit":
                self._exits[int(rest[0])] = int(rest[1])
        return lines

    def _lost(self, *, kill: bool = False) -> None:
        self.gone = True
        if kill:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1)
        self.control.close()

    def _orphan_code(self, pid: int) -> int | None:
        """A child of a zygote that died: SIGTERMed by the kernel with it (PDEATHSIG) and
        reaped by init, so its own exit status is not ours to read; None while it drains."""
        fields = _stat(pid)
        if fields is None or fields[0] == "Z":  # gone, or dead and not yet reaped by init
            self._exits[pid] = -int(signal.SIGTERM)
            return self._exits[pid]
        return None


class Forked:
    """A child of the zygote, with the part of ``subprocess.Popen`` the supervisor uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.returncode(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            self.returncode = self.zygote.returncode(self.pid, left)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    main()
