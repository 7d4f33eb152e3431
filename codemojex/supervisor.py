"""The process supervisor of ``codemojex up``: one web server and N ScoreWorker processes.

* Every child is spawned from the main thread with ``PR_SET_PDEATHSIG(SIGTERM)`` (the kernel
  signals it when this process dies, even by SIGKILL) and in its own process group (a
  terminal's Ctrl-C reaches only us, so we decide the order things stop in).
* Children are forked from a fork server (``codemojex.zygote``) that has imported the stack
  once: a web server or a worker, and a replacement for a killed one, starts without 1.5 s of
  CPU spent importing. Where the fork server cannot start they are spawned (``subprocess``).
* A worker that dies is replaced after a short delay (longer if it keeps dying at start)
  **under a new worker id**, and why it died ("killed (SIGKILL)", "exited 1") is recorded in
  Valkey for the admin page. The web server is restarted the same way, on the same port.
* The supervisor beats into Valkey about once a second and BLPOPs its spawn key: an admin
  "Add worker" order starts one more worker with the id the order carries.
* The embedded Valkey, when there is one, is restarted on its data dir (and port) if it dies:
  its AOF brings every accepted job back.
* ``stop()`` (wired to SIGTERM/SIGINT) SIGTERMs every child — workers finish or release their
  in-flight jobs, the web server drains — waits a bounded time, SIGKILLs whatever is left and
  reaps everything. A second signal (not the same Ctrl-C delivered twice) skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import redis.asyncio

import echomq
import echomq.errors
import echomq.ids
from codemojex import control, keys
from codemojex.zygote import Process, Zygote, ZygoteGone, forkable
from echomq.connection import Client
from echomq.server import die_with_parent

if TYPE_CHECKING:
    from echomq.server import EmbeddedValkey

log = logging.getLogger("codemojex.supervisor")

BEAT_INTERVAL_S = 1.0
POLL_INTERVAL_S = 0.1
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 30.0
QUICK_DEATH_S = 3.0  # a child that dies this soon after its start is crash-looping: back off
STOP_TIMEOUT_S = 15.0  # a worker's grace for in-flight jobs is one lease (10 s), plus margin
READY_TIMEOUT_S = 30.0
# One Ctrl-C can reach us twice: the terminal sends it to the whole foreground group, and
# `uv run` (the README's way to start) forwards what it gets to its child. A repeat this
# soon is the same keystroke, not a second one asking to skip the clean stop.
SAME_SIGNAL_S = 0.5
ZYGOTE_RETRY_S = 30.0  # after the fork server failed to start, spawn directly this long


# The header every web child of one `up` answers with the run's nonce (web.server):
# a /healthz answered without it is another server's, on a port that is not ours.
RUN_HEADER = "x-codemojex-run"
RUN_ENV = "CODEMOJEX_UP_RUN"


class StartupFailed(Exception):
    """The web server died or never answered ``/healthz`` while ``up`` was starting."""


def spawn(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a child that dies with us, in its own process group, sharing our stdout/stderr."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        close_fds=True,
        process_group=0,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl only
    )


def exit_reason(returncode: int) -> str:
    """``"killed (SIGKILL)"`` for a signal, ``"exited 1"`` for an exit status."""
    if returncode < 0:
        try:
            return f"killed ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"killed (signal {-returncode})"
    return f"exited {returncode}"


@dataclass
class Child:
    role: str  # "web" | "worker"
    proc: Process
    worker_id: str | None = None
    metrics_port: int | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        ident = f" {self.worker_id}" if self.worker_id else ""
        return f"{self.role}{ident} (pid {self.proc.pid})"


class Supervisor:
    """Runs the web server and the workers of one machine until :meth:`stop`.

    ``worker_argv``/``web_argv`` are full command lines; each worker also gets its id in
    ``CODEMOJEX_WORKER_ID`` and, with ``worker_metrics_port``, its own metrics port in
    ``CODEMOJEX_METRICS_PORT``. ``health_url`` is polled at start; ``on_ready`` runs once it
    answers 200 (the banner) from one of our own web children: with ``run_nonce``, the web
    children get it in ``CODEMOJEX_UP_RUN`` and an answer must carry it in
    :data:`RUN_HEADER`, else another server holds the port and the start fails.
    ``web_argv=None`` runs workers only; ``web_processes`` web children share one port
    (``SO_REUSEPORT``, set up by ``codemojex web`` itself).
    """

    def __init__(
        self,
        valkey_url: str,
        *,
        env: Mapping[str, str],
        worker_argv: Sequence[str],
        workers: int,
        web_argv: Sequence[str] | None = None,
        web_processes: int = 1,
        worker_metrics_port: int = 0,
        health_url: str | None = None,
        on_ready: Callable[[Supervisor], None] | None = None,
        embedded: EmbeddedValkey | None = None,
        restart_delay: float = RESTART_DELAY_S,
        stop_timeout: float = STOP_TIMEOUT_S,
        fork_server: bool = True,
        run_nonce: str | None = None,
    ) -> None:
        self.supervisor_id = echomq.ids.branded("SUP")
        self.valkey_url = valkey_url
        self.env = dict(env)
        self.worker_argv = list(worker_argv)
        self.web_argv = list(web_argv) if web_argv is not None else None
        self.run_nonce = run_nonce
        self.web_processes = web_processes
        self.worker_metrics_port = worker_metrics_port
        self.initial_workers = workers
        self.health_url = health_url
        self.on_ready = on_ready
        self.embedded = embedded
        self.restart_delay = restart_delay
        self.stop_timeout = stop_timeout
        self.children: list[Child] = []
        self.failure: str | None = None
        self._restarts: list[tuple[float, str]] = []  # (due, role)
        self._backoff: dict[str, float] = {}  # role -> the last restart delay
        self._stopping = asyncio.Event()
        self._force = False
        self._signalled_at: float | None = None
        self._ready = False
        self._background: set[asyncio.Task[None]] = set()
        self._conn: Client | None = None
        self._fork_server = fork_server
        self._zygote: Zygote | None = None
        self._zygote_failed_at = -ZYGOTE_RETRY_S

    # -- control --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin a clean stop; a second call (a second Ctrl-C) stops without waiting."""
        if self._stopping.is_set():
            if not self._force:
                log.warning("second signal: killing every child now")
            self._force = True
        self._stopping.set()

    def _on_signal(self) -> None:
        now = time.monotonic()
        if self._signalled_at is not None and now - self._signalled_at < SAME_SIGNAL_S:
            return
        self._signalled_at = now
        self.stop()

    def workers(self) -> list[Child]:
        return [c for c in self.children if c.role == "worker"]

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> int:
        """Start everything, supervise until stopped, stop everything. 0, or 1 if start failed."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal)
        self._conn = echomq.connect(self.valkey_url, socket_timeout=5, socket_connect_timeout=2)
        tasks: list[asyncio.Task[None]] = []
        try:
            if self.web_argv is not None:
                for _ in range(self.web_processes):
                    self._start_web()
            for _ in range(self.initial_workers):
                self._start_worker(echomq.ids.worker_id())
            tasks = [
                asyncio.create_task(self._beat()),
                asyncio.create_task(self._take_orders()),
                asyncio.create_task(self._await_ready()),
            ]
            while not self._stopping.is_set():
                self._watch()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), POLL_INTERVAL_S)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._stop_children()
            if self._zygote is not None:
                self._zygote.close()
            await self._say_goodbye()
            await asyncio.gather(*self._background, return_exceptions=True)
            await self._conn.aclose()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return 1 if self.failure else 0

    def _start_web(self) -> None:
        assert self.web_argv is not None
        env = self.env if self.run_nonce is None else {**self.env, RUN_ENV: self.run_nonce}
        child = Child("web", self._spawn(self.web_argv, env))
        self.children.append(child)
        log.info("started %s", child.name)

    def _free_metrics_port(self) -> int | None:
        """The lowest of ``worker_metrics_port``, +1, … that no living worker serves on: a
        replacement takes the port of the worker it replaces, so N workers stay on N ports."""
        if not self.worker_metrics_port:
            return None
        taken = {c.metrics_port for c in self.workers()}
        port = self.worker_metrics_port
        while port in taken:
            port += 1
        return port

    def _start_worker(self, worker_id: str) -> None:
        env = {**self.env, "CODEMOJEX_WORKER_ID": worker_id}
        metrics_port = self._free_metrics_port()
        if metrics_port is not None:
            env["CODEMOJEX_METRICS_PORT"] = str(metrics_port)
        child = Child(
            "worker",
            self._spawn(self.worker_argv, env),
            worker_id=worker_id,
            metrics_port=metrics_port,
        )
        self.children.append(child)
        log.info("started %s", child.name, extra={"worker_id": worker_id})
        self._later(control.remember_worker(self._redis(), worker_id))

    def _spawn(self, argv: Sequence[str], env: Mapping[str, str]) -> Process:
        """A fork of the fork server when it can run ``argv``; a new process otherwise."""
        if self._fork_server and forkable(argv):
            zygote = self._zygote_up()
            if zygote is not None:
                try:
                    return zygote.spawn(argv, env)
                except ZygoteGone as e:
                    log.warning("the fork server is gone (%s); starting a new one", e)
                    zygote = self._zygote_up()
                    if zygote is not None:
                        with contextlib.suppress(ZygoteGone):
                            return zygote.spawn(argv, env)
        return spawn(argv, env)

    def _zygote_up(self) -> Zygote | None:
        """The fork server, started if need be (blocking: at most its import time)."""
        if self._zygote is not None and not self._zygote.gone:
            return self._zygote
        if time.monotonic() - self._zygote_failed_at < ZYGOTE_RETRY_S:
            return None
        try:
            self._zygote = Zygote.start(self.env)
        except ZygoteGone as e:
            self._zygote, self._zygote_failed_at = None, time.monotonic()
            log.warning("no fork server (%s): children start as new processes", e)
            return None
        log.info("fork server ready (pid %s)", self._zygote.proc.pid)
        return self._zygote

    def _watch(self) -> None:
        """Reap children that died, schedule their replacements, start the ones due."""
        self._keep_valkey()
        now = time.monotonic()
        for child in list(self.children):
            code = child.proc.poll()
            if code is None:
                continue
            self.children.remove(child)
            reason = exit_reason(code)
            lived = now - child.started
            if child.role == "web" and not self._ready:
                self.failure = f"the web server {reason} while starting (is the port free?)"
                self.stop()
                return
            # A child that keeps dying at start backs off; one that lived a while does not.
            previous = self._backoff.get(child.role)
            delay = (
                min(previous * 2, MAX_RESTART_DELAY_S)
                if previous is not None and lived < QUICK_DEATH_S
                else self.restart_delay
            )
            self._backoff[child.role] = delay
            log.warning(
                "%s %s after %.1fs; restarting in %.1fs",
                child.name,
                reason,
                lived,
                delay,
                extra={"worker_id": child.worker_id},
            )
            if child.worker_id is not None:
                self._later(
                    control.record_exit(self._redis(), child.worker_id, reason, child.proc.pid)
                )
            self._restarts.append((now + delay, child.role))
        due = [r for r in self._restarts if r[0] <= now]
        self._restarts = [r for r in self._restarts if r[0] > now]
        for _, role in due:
            if role == "web":
                self._start_web()
            else:
                self._start_worker(echomq.ids.worker_id())  # a new life, a new id

    def _keep_valkey(self) -> None:
        """Bring a dead embedded Valkey back on the same data dir and port (blocking: the
        children keep running meanwhile; restarted from the main thread for PDEATHSIG)."""
        if self.embedded is None or self.embedded.is_running():
            return
        log.error("the embedded valkey-server died; restarting it from its AOF")
        try:
            self.embedded.start()
        except echomq.errors.ServerError as e:
            self.failure = f"the embedded Valkey died and did not restart: {e}"
            self.stop()
        else:
            log.info("the embedded valkey-server is back (pid %s)", self.embedded.pid)

    async def _await_ready(self) -> None:
        if self.health_url is None:
            self._ready = True
        else:
            deadline = time.monotonic() + READY_TIMEOUT_S
            async with httpx.AsyncClient(timeout=2.0, trust_env=False) as http:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        answer = await http.get(self.health_url)
                        if answer.status_code == 200 and self._ours(answer):
                            break
                        if answer.status_code == 200:
                            self.failure = (
                                f"another server answers {self.health_url}, not this "
                                "up's web server: is the port taken?"
                            )
                            self.stop()
                            return
                    if time.monotonic() > deadline:
                        self.failure = (
                            f"the web server did not answer {self.health_url} "
                            f"within {READY_TIMEOUT_S:g} s"
                        )
                        self.stop()
                        return
                    await asyncio.sleep(0.1)
            self._ready = True
        if self.on_ready is not None:
            self.on_ready(self)

    def _ours(self, answer: httpx.Response) -> bool:
        return self.run_nonce is None or answer.headers.get(RUN_HEADER) == self.run_nonce

    async def _beat(self) -> None:
        host = socket.gethostname()
        # Until the stop, not only until cancelled: redis-py can turn a cancellation that
        # lands mid-command into a connection error, which the loop would outlive.
        while not self._stopping.is_set():
            try:
                await control.beat_supervisor(self._redis(), self.supervisor_id, os.getpid(), host)
            except echomq.errors.TRANSIENT as e:
                log.warning("supervisor beat failed: %s", e)
            await asyncio.sleep(BEAT_INTERVAL_S)

    async def _take_orders(self) -> None:
        """BLPOP the spawn key: each order starts one more worker under the id it carries."""
        conn = echomq.connect(self.valkey_url, socket_timeout=None, socket_connect_timeout=2)
        key = keys.spawn_key(self.supervisor_id)
        try:
            while not self._stopping.is_set():  # as _beat: a cancellation may be swallowed
                try:
                    item = await conn.blpop([key], timeout=1)
                except echomq.errors.TRANSIENT as e:
                    log.warning("spawn orders unavailable: %s", e)
                    await asyncio.sleep(1)
                    continue
                if item is None or self._stopping.is_set():
                    continue
                raw = item[1].decode() if isinstance(item[1], bytes) else str(item[1])
                worker_id = raw if echomq.ids.is_branded(raw, "WRK") else echomq.ids.worker_id()
                log.info("spawn order: one more worker")
                self._start_worker(worker_id)
        finally:
            await conn.aclose()

    # -- stopping -------------------------------------------------------------------------------

    async def _stop_children(self) -> None:
        self._restarts.clear()
        if self.children:
            log.info("stopping %d processes (SIGTERM)", len(self.children))
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while (
            any(c.proc.poll() is None for c in self.children)
            and not self._force
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.05)
        for child in self.children:
            if child.proc.poll() is None:
                log.warning("%s did not stop in time: SIGKILL", child.name)
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=5)

    async def _say_goodbye(self) -> None:
        """Record how each worker ended and leave the supervisor registry (best effort)."""
        conn = self._redis()
        with contextlib.suppress(*echomq.errors.TRANSIENT, redis.RedisError):
            async with asyncio.timeout(3):
                for child in self.workers():
                    code = child.proc.returncode
                    reason = "stopped" if code in (0, -signal.SIGTERM) else exit_reason(code or 0)
                    assert child.worker_id is not None
                    await control.record_exit(conn, child.worker_id, reason, child.proc.pid)
                await conn.hdel(keys.SUPERVISORS, self.supervisor_id)
                await conn.delete(keys.spawn_key(self.supervisor_id))

    # -- helpers --------------------------------------------------------------------------------

    def _redis(self) -> Client:
        assert self._conn is not None
        return self._conn

    def _later(self, coro: Coroutine[Any, Any, Any] | Awaitable[Any]) -> None:
        """Run a Valkey bookkeeping call in the background: a slow Valkey must not stall
        reaping children."""

        async def guarded() -> None:
            try:
                await coro
            except Exception as e:  # noqa: BLE001 - bookkeeping is best effort
                log.warning("supervisor bookkeeping failed: %s", e)

        task = asyncio.create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
