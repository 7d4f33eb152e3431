"""``up`` says "Codemojex is up" only once its own web server answers: another HTTP server
on its port, answering ``/healthz`` and ``/readyz`` 200, makes it fail with a line naming
the port, whether it is there before ``up`` starts (the port check) or answers in place of
``up``'s web children (the health answer must carry the run's nonce)."""

from __future__ import annotations

import asyncio
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemojex.supervisor import Supervisor
from echomq.server import EmbeddedValkey
from harness.running import Up

pytestmark = pytest.mark.slow


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"status":"healthy"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def squatter() -> Iterator[int]:
    """The port of another HTTP server that answers every GET 200 (``/healthz`` too)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_up_on_a_port_another_server_answers_fails_naming_the_port(
    data_dir: Path, squatter: int
) -> None:
    up = Up(data_dir, "--workers", "0", "--port", str(squatter))  # the last --port wins
    up.start()
    try:
        assert up.proc is not None
        code = up.proc.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"up kept running on a taken port\n{up.logs()}") from None
    finally:
        up.kill_everything()
    out = up.out_path.read_text(errors="replace")
    err = up.err_path.read_text(errors="replace")
    assert "Codemojex is up" not in out, up.logs()
    assert code != 0, up.logs()
    assert f"port {squatter}" in err, up.logs()


def test_a_health_answer_from_another_server_is_not_taken_for_the_web_server(
    tmp_path: Path, squatter: int
) -> None:
    valkey = EmbeddedValkey(tmp_path / "valkey")
    valkey.start()
    announced: list[str] = []
    try:
        # A web child that never serves: what answers the port is the other server.
        supervisor = Supervisor(
            valkey.url,
            env={},
            worker_argv=[sys.executable, "-c", "pass"],
            workers=0,
            web_argv=[sys.executable, "-c", "import time; time.sleep(60)"],
            health_url=f"http://127.0.0.1:{squatter}/healthz",
            on_ready=lambda sup: announced.append(sup.supervisor_id),
            run_nonce="this-run",
            fork_server=False,
            stop_timeout=2,
        )
        code = asyncio.run(asyncio.wait_for(supervisor.run(), 30))
    finally:
        valkey.stop()
    assert announced == []
    assert code == 1
    assert supervisor.failure is not None and str(squatter) in supervisor.failure
