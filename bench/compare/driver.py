"""The parent's half of the driver protocol (``peers/_protocol.py`` has the whole of it): one
driver subprocess, its stdout read by a thread into a queue, commands sent one a line, and the
process always ended."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from bench.common import ROOT


class DriverError(RuntimeError):
    """A driver failed: it died, timed out, or answered a command with an error."""


class Driver:
    """``python -m bench.compare.peers.<module> --role ROLE ...`` in a peer's venv."""

    def __init__(
        self, python: Path, module: str, args: list[str], log: Path, *, ready_s: float = 60.0
    ) -> None:
        self.label = f"{module} {' '.join(args[:2])}"
        self.log = log
        self.handled = 0
        self.done = False
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file: IO[bytes] = log.open("ab")
        self.proc = subprocess.Popen(
            [str(python), "-m", f"bench.compare.peers.{module}", *args],
            cwd=ROOT,  # where `bench.compare.peers` is importable from, in any venv
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            bufsize=1,
            process_group=0,  # a terminal's Ctrl-C reaches only us; we end the drivers
        )
        threading.Thread(target=self._read, daemon=True).start()
        try:
            hello = self._next(ready_s)
            if hello.get("event") != "ready":
                raise DriverError(f"{self.label}: expected ready, got {hello}")
        except BaseException:
            self.close()
            raise
        self.version = str(hello.get("version", ""))
        self.pid = int(hello.get("pid", self.proc.pid))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-2500:]
        return ""

    def _next(self, timeout: float) -> dict[str, Any]:
        """The next message; progress and done events are noted on the way."""
        try:
            msg = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise DriverError(f"{self.label}: no answer in {timeout:.0f} s") from None
        return self._take(msg)

    def _take(self, msg: dict[str, Any] | None) -> dict[str, Any]:
        if msg is None:
            raise DriverError(
                f"{self.label}: exited (code {self.proc.wait()}); its log:\n{self._tail()}"
            )
        event = msg.get("event")
        if event in ("progress", "done"):
            self.handled = int(msg["handled"])
            self.done = self.done or event == "done"
        elif event == "error":
            raise DriverError(f"{self.label}: its consumer died:\n{msg['error']}")
        return msg

    def send(self, op: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise DriverError(f"{self.label}: gone ({e}); its log:\n{self._tail()}") from e

    def ask(self, op: str, timeout: float = 60.0, **args: Any) -> dict[str, Any]:
        """Send a command and wait for its reply."""
        if op == "arm":
            self.done = False
            self.handled = 0
        self.send(op, **args)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._next(deadline - time.monotonic())
            if msg.get("reply") == op:
                if "error" in msg:
                    raise DriverError(f"{self.label}: {op} failed:\n{msg['error']}")
                return msg

    def pump(self, timeout: float) -> None:
        """Take in events for up to ``timeout`` s (returns after the first one)."""
        try:
            msg = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self._take(msg)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(DriverError, OSError, ValueError):
                self.send("stop")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._log_file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
