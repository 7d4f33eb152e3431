"""``python -m bench.bench_store``: the store benchmark's command (and its latency children's);
the benchmark is bench/store/."""

from __future__ import annotations

from bench.store.cli import main

if __name__ == "__main__":
    main()
