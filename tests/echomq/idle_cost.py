"""What idle consumers cost the server, read from ``INFO commandstats`` deltas.

    python -m tests.echomq.idle_cost [WORKERS] [WINDOW_S]

Starts a private valkey-server and WORKERS idle consumer processes (production defaults,
each hosting a reaper as every worker process does), lets them settle, resets the
server's statistics, waits WINDOW_S seconds and prints what was run: commands sent by the
clients (EVALSHA, EVAL, BLPOP, …) and the commands run inside scripts, per second and per
consumer. Run from a checkout's root, it measures that checkout's echomq.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from echomq.server import EmbeddedValkey

ROOT = Path(__file__).resolve().parents[2]
# Commands an idle consumer sends (scripts, its park, connection set-up); commandstats
# cannot tell who ran the rest, which idle consumers only run inside scripts.
CLIENT_COMMANDS = {
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "blpop",
    "ping",
    "hello",
    "client|setinfo",
    "client|setname",
    "script|load",
}
OURS = {"info", "config|resetstat", "config|get", "config|set"}


def _stats(client: redis.Redis) -> dict[str, int]:
    raw = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()}


def measure(workers: int = 2, window_s: float = 20.0, settle_s: float = 3.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedValkey(Path(tmp) / "valkey", appendfsync="everysec")
        server.start()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.echomq.proc_idle", server.url, "idle"],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            for _ in range(workers)
        ]
        client = redis.Redis.from_url(server.url)
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
            time.sleep(settle_s)
            client.config_resetstat()
            t0 = time.monotonic()
            time.sleep(window_s)
            calls = _stats(client)
            elapsed = time.monotonic() - t0
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(15)
                if p.stdout is not None:
                    p.stdout.close()
            client.close()
            server.stop()
    sent = {k: v for k, v in calls.items() if k in CLIENT_COMMANDS}
    inside = {k: v for k, v in calls.items() if k not in CLIENT_COMMANDS | OURS}
    per = elapsed * workers
    return {
        "workers": workers,
        "window_s": round(elapsed, 1),
        "client_cmds_per_s_per_consumer": round(sum(sent.values()) / per, 2),
        "script_cmds_per_s_per_consumer": round(sum(inside.values()) / per, 2),
        "client_cmds": sent,
        "script_cmds": inside,
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    print(
        json.dumps(
            measure(int(args[0]) if args else 2, float(args[1]) if len(args) > 1 else 20.0),
            indent=2,
        )
    )
