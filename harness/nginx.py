"""Debian's nginx in front of real web processes, with the very config compose ships.

:func:`loopback_config` is deploy/nginx/nginx.conf with only what must differ on loopback
substituted, each substitution checked to apply exactly once (a change to the shipped file
that moves one fails here, loudly, rather than testing something else):

* the upstream's ``server web:8000 resolve;`` becomes one ``server 127.0.0.1:PORT;`` per
  web process (Docker's DNS is not here, and Debian's nginx predates ``resolve``);
* ``listen 80;`` becomes ``listen 127.0.0.1:PORT;``;
* the pid file, the error log and the temporary files go under the run's directory;
* as root, ``user root;``: workers that fell back to nobody could not reach that directory.

:func:`behind_nginx` starts ``nginx -p DIR -c CONF -g 'daemon off;'`` with it, waits until
nginx answers, yields its port and stops it (SIGQUIT, then SIGKILL) at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from harness.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "deploy" / "nginx" / "nginx.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
INSTALL = "apt-get install -y nginx"
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")

__all__ = [
    "NGINX",
    "SHIPPED",
    "ConfigMismatch",
    "Connection",
    "Nginx",
    "Response",
    "behind_nginx",
    "connect",
    "loopback_config",
    "pipelined",
    "pipelined_on",
    "require_nginx",
    "running_nginx",
]


class ConfigMismatch(AssertionError):
    """The shipped config no longer has the line a loopback substitution replaces."""


def require_nginx() -> str:
    """nginx's path; where it is missing, a failure under CI=true, else a skip."""
    if not os.access(NGINX, os.X_OK):
        message = f"nginx not installed: {INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return NGINX


def _once(pattern: str, replacement: str, text: str, what: str) -> str:
    out, n = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if n != 1:
        raise ConfigMismatch(f"{SHIPPED.name}: {what} found {n} times, not once")
    return out


def loopback_config(
    text: str,
    upstreams: Sequence[tuple[str, int]],
    port: int,
    prefix: Path,
    *,
    root: bool,
    limit_req: tuple[int, int] | None = None,
) -> str:
    """``text`` (the shipped config) for nginx on ``127.0.0.1:port`` in front of
    ``upstreams``, its pid, error log and temporary files under ``prefix``; ``limit_req``
    (rate per second, burst) in place of the shipped per-address limit (the per-player one
    stays), for an instrument's test that must trip it on a machine too busy to pass the
    shipped rate."""
    if limit_req is not None:
        rate, burst = limit_req
        text = _once(
            r"(zone=per_address_rate:\S+ )rate=\d+r/s;",
            rf"\g<1>rate={rate}r/s;",
            text,
            "the per-address limit_req rate",
        )
        text = _once(
            r"(zone=per_address_rate )burst=\d+ nodelay;",
            rf"\g<1>burst={burst} nodelay;",
            text,
            "the per-address limit_req burst",
        )
    if not upstreams:
        raise ValueError("nginx needs at least one upstream")
    servers = "".join(f"        server {host}:{p};\n" for host, p in upstreams)
    text = _once(r"^\s*server\s+web:\d+\s+resolve;\n", servers, text, "the upstream server")
    text = _once(r"^(\s*)listen\s+80;", rf"\g<1>listen 127.0.0.1:{port};", text, "listen 80")
    head = [f"pid {prefix / 'nginx.pid'};", f"error_log {prefix / 'error.log'} notice;"]
    if root:
        head.append("user root;")
    temp = "".join(f"    {name}_temp_path {prefix / 'temp' / name};\n" for name in TEMP_PATHS)
    text = _once(r"^http \{\n", f"http {{\n{temp}", text, "the http block")
    return "\n".join(head) + "\n" + text


@dataclass
class Nginx:
    """A running nginx: its port, master process and directory (error.log is there)."""

    port: int
    proc: subprocess.Popen[bytes]
    prefix: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in children.read_text().split()]

    def errors(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@contextlib.contextmanager
def running_nginx(
    upstreams: Sequence[tuple[str, int]],
    prefix: Path | None = None,
    *,
    limit_req: tuple[int, int] | None = None,
) -> Iterator[Nginx]:
    """Real nginx with the shipped config in front of ``upstreams``, ready, stopped at exit
    (``limit_req``: see :func:`loopback_config`)."""
    binary = require_nginx()
    with contextlib.ExitStack() as stack:
        if prefix is None:
            prefix = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nginx-")))
        for name in TEMP_PATHS:
            (prefix / "temp" / name).mkdir(parents=True, exist_ok=True)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(
            loopback_config(
                SHIPPED.read_text(encoding="utf-8"),
                upstreams,
                port,
                prefix,
                root=os.geteuid() == 0,
                limit_req=limit_req,
            )
        )
        with open(prefix / "stderr.log", "wb") as err:
            proc = subprocess.Popen(
                [binary, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                process_group=0,  # its workers with it: a SIGKILLed master leaves them serving
            )
        nginx = Nginx(port, proc, prefix)
        stack.callback(_stop, proc)
        _wait_ready(nginx)
        yield nginx


@contextlib.contextmanager
def behind_nginx(upstreams: list[tuple[str, int]]) -> Iterator[int]:
    """nginx's port, in front of ``upstreams`` (``[("127.0.0.1", port), …]``)."""
    with running_nginx(upstreams) as nginx:
        yield nginx.port


def _wait_ready(nginx: Nginx, timeout: float = 10.0) -> None:
    """Until nginx itself answers (its own /metrics 404, which needs no upstream)."""
    deadline = time.monotonic() + timeout
    while True:
        if nginx.proc.poll() is not None:
            raise AssertionError(
                f"nginx exited {nginx.proc.returncode}\n"
                f"{(nginx.prefix / 'stderr.log').read_text(errors='replace')}\n{nginx.errors()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{nginx.base}/metrics", trust_env=False, timeout=2).status_code == 404:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"nginx did not answer within {timeout} s\n{nginx.errors()}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGQUIT (finish what is served), then SIGTERM (drop it: an open websocket would hold
    a graceful stop forever), then SIGKILL to the whole group."""
    for sig in (signal.SIGQUIT, signal.SIGTERM):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)


class Response(NamedTuple):
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def parse_responses(data: bytes) -> list[Response]:
    """The HTTP/1.1 responses in ``data``, one after another (each with a Content-Length,
    as nginx's own and the app's answers have)."""
    out = []
    while data:
        head, sep, data = data.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError(f"a truncated response head: {head[:200]!r}")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        out.append(Response(int(status_line.split()[1]), headers, data[:length]))
        data = data[length:]
    return out


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(source: str, port: int) -> Connection:
    """A connection from ``source`` (a loopback address) to 127.0.0.1:``port``."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def pipelined_on(conn: Connection, port: int, paths: Sequence[str]) -> list[Response]:
    """``GET`` each of ``paths``, pipelined on the open ``conn``, the last with
    ``Connection: close``: the answers in order. nginx serves at most 1,000 requests on one
    connection (keepalive_requests)."""
    reader, writer = conn
    last = len(paths) - 1

    def request(i: int, path: str) -> bytes:
        close = "Connection: close\r\n" if i == last else ""
        return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{close}\r\n".encode()

    writer.write(b"".join(request(i, p) for i, p in enumerate(paths)))
    try:
        data = await asyncio.wait_for(reader.read(-1), 60)
    finally:
        writer.close()
    return parse_responses(data)


async def pipelined(source: str, port: int, paths: Sequence[str]) -> list[Response]:
    """:func:`pipelined_on` a new connection from ``source``."""
    return await pipelined_on(await connect(source, port), port, paths)
