"""``python -m bench.bench_game``: the game benchmark's command; the benchmark is bench/game/."""

from __future__ import annotations

import contextlib
import sys

from bench.game.cli import main

if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
