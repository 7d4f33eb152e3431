"""``python -m bench.bench_partitions``: the partitions benchmark's command (and its workers');
the benchmark is bench/partitions/."""

from __future__ import annotations

import contextlib

from bench.partitions.cli import main

if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
