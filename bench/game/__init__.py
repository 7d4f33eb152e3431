"""The game path's speed: open-loop guesses against ``codemojex up`` (``python -m bench.bench_game``,
whose help is :mod:`bench.game.cli`'s)."""
