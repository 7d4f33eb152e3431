"""``python -m bench.bench_floor``: the floor benchmark's command (and its web and worker
processes'); the benchmark is bench/floor/."""

from __future__ import annotations

import sys

from bench.floor.cli import main

if __name__ == "__main__":
    sys.exit(main())
