"""A crowd of watchers for bench_game: players whose websockets only read, in processes of
their own (``python -m bench.watchers``, :mod:`bench.watchers.crowd`)."""
