"""Closed-loop mashers: random guesses back to back on a keep-alive connection, as fast as the
door answers; the door's tests and bench_door both run them."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson

__all__ = ["MashTally", "exchange", "guess_request", "mash_loop"]


@dataclass
class MashTally:
    """What closed-loop mashers were told: answers by status, and the accepted job ids."""

    statuses: Counter[int] = field(default_factory=Counter)
    accepted: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


def guess_request(token: str, round_id: str, guess: list[str]) -> bytes:
    """A whole ``POST /api/guesses`` on a keep-alive connection."""
    body = orjson.dumps({"round_id": round_id, "guess": guess})
    return (
        b"POST /api/guesses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request and its answer (status, lower-cased headers, body) on an open connection."""
    writer.write(request)
    line = await reader.readline()
    if not line:
        raise ConnectionResetError("the server closed the connection")
    status = int(line.split()[1])
    headers: dict[bytes, bytes] = {}
    while (header := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = header.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
    return status, headers, body


async def mash_loop(
    port: int,
    token: str,
    round_id: str,
    palette: list[str],
    length: int,
    until: float,
    tally: MashTally,
    *,
    source: str = "127.0.0.1",
    rng: random.Random | None = None,
) -> None:
    """A keyboard masher's loop until ``until`` (monotonic): random guesses back to back on
    one keep-alive connection from ``source``, sleeping ``Retry-After`` on a 429 and sending
    again at once on a 503, as a script that ignores the door does. Raw HTTP/1.1 on asyncio
    streams: an HTTP client library costs a load generator more CPU than the server's answer,
    and a masher script is not slowed by its own client."""
    rng = rng or random.Random()
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        while time.monotonic() < until:
            try:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                guess = [rng.choice(palette) for _ in range(length)]
                status, headers, body = await exchange(*conn, guess_request(token, round_id, guess))
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                tally.errors[type(exc).__name__] += 1
                if conn is not None:
                    conn[1].close()
                conn = None
                await asyncio.sleep(0.05)
                continue
            tally.statuses[status] += 1
            if status == 202:
                tally.accepted.append(str(orjson.loads(body)["job_id"]))
            elif status == 429:
                await asyncio.sleep(int(headers.get(b"retry-after", b"1")))
            if headers.get(b"connection") == b"close":
                conn[1].close()
                conn = None
    finally:
        if conn is not None:
            conn[1].close()
