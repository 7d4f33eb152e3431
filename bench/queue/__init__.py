"""EchoMQ's own cost on Valkey (``python -m bench.bench_echomq``, whose help is
:mod:`bench.queue.cli`'s)."""
