"""The store's cost per scored guess, SQLite against PostgreSQL (``python -m bench.bench_store``,
whose help is :mod:`bench.store.cli`'s)."""
