"""A partitioned queue on a Valkey Cluster, by partition count (``python -m
bench.bench_partitions``, whose help is :mod:`bench.partitions.cli`'s)."""
