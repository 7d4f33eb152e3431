"""Honest players against mashers at the door (``python -m bench.bench_door``, whose help is
:mod:`bench.door.cli`'s)."""
