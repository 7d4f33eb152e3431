"""What a run of the door benchmark is asked for: its rows (mashers, addresses, spread), the
addresses and CPUs it uses, and the windows' timings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROWS = "0:0,10:same,50:same,200:20:spread,200:20,replay:5,0:0"
REPLAY = -1  # a row's "mashers" for the replay loop (its "addresses": the loop's sockets)
REPLAY_ADDRESS = "127.0.0.250"  # the replay loop's own client address
REPLAY_QUIET_S = 0.5  # a greeting is over once its socket is this quiet (or sent progress)
ROUND_SECONDS = 3600
CPU_SAMPLE_S = 0.1
ONSET_S = 3.0  # the start of a row's window, left out of the steady-state p99
SLOW_S = 0.1  # an honest answer slower than this is listed with its time in the window
SETTLE_S = 2.0  # quiet between rows: the last backlog scores, sockets settle


HONEST_ADDRESS = "127.0.0.1"
# A row: (mashers, addresses) or (mashers, addresses, spread). addresses 0: the mashers send
# from the honest players' address; K: from 127.0.0.2 … 127.0.0.K+1, and with spread the
# honest players' guesses come from those same K addresses (round robin), else from their own.
Row = tuple[int, int] | tuple[int, int, bool]
SERVER_CPU = 0  # bench_door pins the server (`up` and every child) here
CLIENT_CPU = 1  # and itself and its masher processes here


@dataclass
class Options:
    rows: list[Row] = field(default_factory=lambda: parse_rows(ROWS))
    duration: float = 8.0
    players: int = 100
    honest_rate: float = 30.0
    masher_in_flight: int = 8
    up_args: list[str] = field(default_factory=list)
    cost_requests: int = 600
    progress: bool = True
    seed: int = 7
    door_slots: int = 16  # the web's --door-in-flight (the cost of a 503 fills them)
    masher_procs: int = 0  # masher processes per row; 0: one per 100 mashers
    costs: bool = True
    pin: bool = False  # main(): the server on SERVER_CPU, the clients on CLIENT_CPU
    nginx: bool = False  # main(): the rows through nginx (front_port), as deployed
    front_port: int | None = None  # where the clients send, when not the web itself
    server_rev: str | None = None  # main(): the server of this git revision
    json: Path | None = None


def parse_rows(text: str) -> list[Row]:
    """``mashers:addresses[:spread]`` rows (``same`` for the honest players' address);
    ``replay:K`` is the replay loop with K sockets, kept as ``(REPLAY, K)``."""
    rows: list[Row] = []
    for part in text.split(","):
        mashers, _, rest = part.strip().partition(":")
        addresses, _, spread = rest.partition(":")
        if mashers == "replay":
            rows.append((REPLAY, int(addresses or "5")))
            continue
        n = int(mashers)
        k = 0 if addresses == "same" or not n else int(addresses or "1")
        rows.append((n, k, True) if spread == "spread" and k else (n, k))
    return rows


def masher_address(i: int, addresses: int) -> str:
    """Masher ``i``'s client address: the honest players' with ``addresses`` 0."""
    return f"127.0.0.{2 + i % addresses}" if addresses else HONEST_ADDRESS


def row_label(mashers: int, addresses: int, spread: bool) -> str:
    if mashers == REPLAY:
        return f"replay loop ({addresses} sockets, after=0)"
    if not mashers:
        return "none (alone)"
    if not addresses:
        return f"{mashers} (the honest players' address)"
    where = f"{addresses} address{'es' if addresses != 1 else ''}"
    return f"{mashers} ({where}; honest {'spread over them' if spread else 'on another'})"
