"""``python -m bench.bench_echomq``: the EchoMQ benchmark's command; the benchmark is bench/queue/."""

from __future__ import annotations

import contextlib
import sys

from bench.queue.cli import main

if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
