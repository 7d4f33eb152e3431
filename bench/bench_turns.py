"""What the parse order (``web.turns``) costs a request, beside parsing at once. Prints
figures; it is not a test.

    uv run python -m bench.bench_turns [--requests 50000] [--rounds 5]

Each round, on one uvloop loop, the same request heads (an API guess as httpx sends it, a
bearer token among 100 players) are handed over in turns of 10, as a loop reads them:

- **at once**: each head straight to its connection's parse (what uvicorn does alone);
- **light**: through :class:`web.turns.Turns`, every sender light (answered before, one
  request unanswered): the order costs its regular-expression search, its counts and one
  callback a turn;
- **a gang beside**: the same, plus as many requests from 20 tokens with 8 unanswered each,
  which wait and are parsed 8 a turn.

The connections' parse is a no-op, so the figures are the order's own cost per request
(µs of this process's CPU), then its ratio to the at-once baseline of the same round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import deque

import uvloop

from web.turns import Turns

HEAD = (
    b"POST /api/guesses HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\n"
    b"Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
    b"User-Agent: python-httpx/0.28.1\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer %s\r\nIdempotency-Key: 0123456789abcdef0123456789abcdef\r\n"
    b"Content-Length: 80\r\n\r\n" + b"x" * 80
)
PER_TURN = 10


class Conn:
    __slots__ = ("parsed", "turn_backlog", "turn_closed", "turn_senders")

    def __init__(self) -> None:
        self.turn_backlog: deque[tuple[bytes, bytes | None]] | None = None
        self.turn_senders: deque[bytes] = deque()
        self.turn_closed = False
        self.parsed = 0

    def parse(self, data: bytes) -> None:
        self.parsed += 1

    def hold_reading(self, held: bool) -> None:
        pass


async def _run(mode: str, requests: int) -> float:
    """CPU seconds per request for ``requests`` heads handed over in ``mode``."""
    players = [HEAD % f"player-{i:03d}.{'k' * 40}".encode() for i in range(100)]
    gang = [HEAD % f"masher-{i:02d}.{'m' * 40}".encode() for i in range(20)]
    turns = Turns()
    turns.seen.update({p.split(b"Bearer ")[1].split(b"\r\n")[0]: None for p in players})
    conns = [Conn() for _ in range(100)]
    mashers = [Conn() for _ in range(160)]
    if mode == "gang":
        for i, conn in enumerate(mashers):  # 8 unanswered each: heavy from the start
            turns.offer(conn, gang[i % 20])
        await asyncio.sleep(0)
    start = time.process_time()
    for i in range(0, requests, PER_TURN):
        batch = conns[i % 100 : i % 100 + PER_TURN]
        for j, conn in enumerate(batch):
            if mode == "at-once":
                conn.parse(players[(i + j) % 100])
            else:
                turns.offer(conn, players[(i + j) % 100])
                if mode == "gang":
                    turns.offer(mashers[(i + j) % 160], gang[(i + j) % 20])
        await asyncio.sleep(0)  # the turn ends: Turns parses what it read
        if mode != "at-once":
            for conn in batch:
                turns.answered(conn)
    await asyncio.sleep(0)
    spent = time.process_time() - start
    parsed = sum(c.parsed for c in conns)
    if parsed != requests:
        raise RuntimeError(f"{mode}: {parsed} of {requests} parsed")
    return spent / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"at-once": [], "light": [], "gang": []}
    for _ in range(args.rounds):
        for mode, values in figures.items():  # interleaved: a busy second hits all alike
            values.append(uvloop.run(_run(mode, args.requests)))
    base = statistics.median(figures["at-once"])
    print(f"{args.requests:,} requests a round, {args.rounds} rounds, median per request:")
    for mode, values in figures.items():
        cost = statistics.median(values)
        extra = "" if mode == "at-once" else f"  (+{(cost - base) * 1e6:.2f} µs over at once)"
        print(f"  {mode:8} {cost * 1e6:6.2f} µs{extra}")


if __name__ == "__main__":
    main()
