"""Run ``codemojex up`` as a real subprocess, and find every process it left behind.

``Up`` records each descendant it ever sees (``/proc/<pid>/task/*/children``, recursively) so
that, after ``up`` has gone, a test can check that none of them survived — and a fixture can
kill them all even when the test failed half-way.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from harness.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent


def children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out |= {int(p) for p in (task / "children").read_text().split()}
    return out


def descendants(pid: int) -> set[int]:
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()) - found:
            found.add(child)
            todo.append(child)
    return found


def is_running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def processes_mentioning(text: str) -> set[int]:
    me = os.getpid()
    return {
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit()
        and int(p.name) != me
        and text in cmdline(int(p.name))
        and is_running(int(p.name))
    }


class Up:
    """One ``python -m codemojex up`` on a free port, in its own process group."""

    def __init__(
        self, data_dir: Path, *args: str, root: Path = ROOT, env: Mapping[str, str] | None = None
    ) -> None:
        """``root``: the checkout whose ``codemojex`` runs (benchmarks pass an older one
        from a ``git worktree`` to measure a baseline in the same run). ``env``: variables
        on top of the caller's environment without its ``CODEMOJEX_*`` ones (a developer's
        shell must not leak into a test)."""
        self.root = root
        self.extra_env = dict(env or {})
        self.data_dir = data_dir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "codemojex",
            "up",
            "--port",
            str(self.port),
            "--data-dir",
            str(data_dir),
            *args,
        ]
        n = len(list(data_dir.parent.glob("up-*.out")))
        self.out_path = data_dir.parent / f"up-{n}.out"
        self.err_path = data_dir.parent / f"up-{n}.err"
        self.proc: subprocess.Popen[bytes] | None = None
        self.seen: set[int] = set()
        self.admin_token = ""
        self.valkey_url = ""

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Up:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
        env.update(self.extra_env)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=self.root,
                process_group=0,
            )
        return self

    def wait_ready(self, timeout: float = 30.0) -> Up:
        """Until the banner is printed and ``/healthz`` answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            self.track()
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"up exited {self.proc.returncode}\n{self.logs()}")
            banner = self.out_path.read_text(errors="replace")
            token = re.search(r"admin token\s+(\S+)", banner)
            valkey = re.search(r"valkey\s+(\S+)", banner)
            if token and valkey:
                with contextlib.suppress(httpx.HTTPError):
                    if (
                        httpx.get(f"{self.base}/healthz", timeout=2, trust_env=False).status_code
                        == 200
                    ):
                        self.admin_token, self.valkey_url = token[1], valkey[1]
                        # The banner hides the embedded server's password; it is in the
                        # data dir, readable by its owner (us).
                        secret = self.data_dir / "valkey_password"
                        if ":***@" in self.valkey_url and secret.exists():
                            self.valkey_url = self.valkey_url.replace(
                                "***", secret.read_text().strip()
                            )
                        self.track()
                        return self
            if time.monotonic() > deadline:
                raise AssertionError(f"up was not ready within {timeout} s\n{self.logs()}")
            time.sleep(0.1)

    def web_pids(self) -> list[int]:
        """The live ``codemojex web`` processes of this ``up``."""
        return sorted(p for p in self.track() if re.search(r"codemojex web\b", cmdline(p)))

    def track(self) -> set[int]:
        """Every live descendant now; each one is remembered for the orphan check."""
        if self.proc is None:
            return set()
        now = descendants(self.proc.pid)
        self.seen |= now
        return now

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an operator (or systemd) would, and wait for a clean exit."""
        assert self.proc is not None
        self.track()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"up did not stop within {timeout} s\n{self.logs()}") from None

    def serves_and_stops(self, timeout: float = 60.0) -> None:
        """Start, answer ``/readyz`` with 200, stop cleanly on SIGTERM; nothing survives."""
        try:
            self.start().wait_ready(timeout=timeout)
            assert httpx.get(f"{self.base}/readyz", timeout=5, trust_env=False).status_code == 200
            assert self.stop() == 0, self.logs()
        finally:
            self.kill_everything()

    def leftovers(self) -> set[int]:
        """Processes of this ``up`` still running: seen descendants, or anything naming the
        data dir on its command line (valkey's config file, the children's --data-dir)."""
        return {p for p in self.seen if is_running(p)} | processes_mentioning(str(self.data_dir))

    def kill_everything(self) -> None:
        """Test teardown: nothing survives, whatever state the test left."""
        if self.proc is not None and self.proc.poll() is None:
            self.track()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def logs(self) -> str:
        out = self.out_path.read_text(errors="replace") if self.out_path.exists() else ""
        err = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        return f"--- stdout\n{out}\n--- stderr\n{err[-6000:]}"

    # -- the public API -------------------------------------------------------------------------

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


def wait_until(
    predicate: Any, timeout: float, what: str, logs: Any = None, interval: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{logs()}" if logs else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")
        time.sleep(interval)


class WebProcess:
    """One ``python -m codemojex web`` started by :func:`web_processes` (its output in
    ``log``)."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log = log

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


W = TypeVar("W", bound=WebProcess)


@contextlib.contextmanager
def web_processes(
    tmp_path: Path, kind: type[W], base_env: dict[str, str] | None = None
) -> Iterator[Callable[..., W]]:
    """``start(*flags, env={...}, prefix=[...])`` -> a ready ``codemojex web`` (a ``kind``)
    on a fresh Valkey and a migrated SQLite file, its command run under ``prefix``
    (``prlimit …``), with none of the caller's ``CODEMOJEX_*`` or uvicorn's
    ``FORWARDED_ALLOW_IPS`` but ``base_env`` and ``env``; every one stopped (SIGTERM,
    then SIGKILL) on exit."""
    from codemojex.store import migrate
    from echomq.server import EmbeddedValkey

    valkey = EmbeddedValkey(tmp_path / "valkey")
    valkey.start()
    database = f"sqlite:///{tmp_path / 'codemojex.db'}"
    migrate(database)
    started: list[W] = []

    def start(*flags: str, env: dict[str, str] | None = None, prefix: Sequence[str] = ()) -> W:
        port = free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CODEMOJEX_")}
        clean.pop("FORWARDED_ALLOW_IPS", None)
        log = tmp_path / f"web-{len(started)}.log"
        argv = [
            *prefix,
            *(sys.executable, "-m", "codemojex", "web"),
            *("--valkey-url", valkey.url, "--database-url", database),
            *("--data-dir", str(tmp_path / "data"), "--port", str(port)),
            *flags,
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**clean, **(base_env or {}), **(env or {})},
                cwd=ROOT,
            )
        web = kind(proc, port, log)
        started.append(web)
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"web exited {proc.returncode}\n{web.logs()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{web.base}/healthz", trust_env=False, timeout=2).status_code == 200:
                    return web
            if time.monotonic() > deadline:
                raise AssertionError(f"web was not ready within 30 s\n{web.logs()}")
            time.sleep(0.1)

    try:
        yield start
    finally:
        for web in started:
            web.proc.terminate()
            try:
                web.proc.wait(15)
            except subprocess.TimeoutExpired:
                web.proc.kill()
                web.proc.wait(5)
        valkey.stop()
