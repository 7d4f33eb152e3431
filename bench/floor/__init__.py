"""The game's floor: the barest code on the same parts (``python -m bench.bench_floor``, whose
help is :mod:`bench.floor.cli`'s)."""
