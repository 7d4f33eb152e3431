"""``python -m bench.bench_door``: the door benchmark's command; the benchmark is bench/door/."""

from __future__ import annotations

import sys

from bench.door.cli import main

if __name__ == "__main__":
    sys.exit(main())
