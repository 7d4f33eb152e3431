"""The consumer: claims jobs under a lease and runs a handler over them."""

from .consumer import Consumer, Handler

__all__ = ["Consumer", "Handler"]
