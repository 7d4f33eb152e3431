"""What a mash run is asked to do (``codemojex mash``'s flags, or a caller's choices)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

MAX_MASHER_ADDRESSES = 250  # 127.0.0.2 ... 127.0.0.251


def masher_address(i: int, addresses: int) -> str | None:
    """The source address of masher ``i`` of ``addresses`` (None: the default one)."""
    return f"127.0.0.{2 + i % addresses}" if addresses else None


def is_loopback_url(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.")


@dataclass(frozen=True, slots=True)
class MashOptions:
    url: str
    players: int = 200  # honest players
    mashers: int = 10
    duration: float = 60.0  # seconds of load; then submissions stop and the backlog drains
    masher_rate: float | None = None  # guesses per second per masher; None: as fast as taken
    # Requests each masher keeps in flight, each on a connection of its own (closed loops:
    # a 429 makes that loop sleep Retry-After, a 503 does not).
    masher_in_flight: int = 8
    # Loopback source addresses the mashers send from, round robin: 127.0.0.2 ... (0: the
    # honest players' address). The server sees each as a client address of its own.
    masher_addresses: int = 0
    chaos_kill_every: float | None = None  # seconds between kills; needs admin_token
    admin_token: str | None = None  # also turns on the queue-depth samples
    report: Path | None = None
    seed: int | None = None
    drain_timeout: float = 60.0  # how long the backlog may take to be scored after the load
    think_s: tuple[float, float] = (1.0, 3.0)  # an honest player's pause between guesses
    progress: bool = True  # live progress on stderr
    name_prefix: str = "mash"

    def __post_init__(self) -> None:
        if self.players < 0 or self.mashers < 0 or self.players + self.mashers == 0:
            raise ValueError("need at least one player or masher")
        if self.duration <= 0 or self.drain_timeout < 0:
            raise ValueError("duration must be > 0 and drain timeout >= 0")
        if self.masher_rate is not None and self.masher_rate <= 0:
            raise ValueError("--masher-rate must be > 0")
        if self.masher_in_flight < 1:
            raise ValueError("--masher-in-flight must be 1 or more")
        if not 0 <= self.masher_addresses <= MAX_MASHER_ADDRESSES:
            raise ValueError(f"--masher-addresses must be 0 to {MAX_MASHER_ADDRESSES}")
        if self.masher_addresses and not is_loopback_url(self.url):
            raise ValueError(
                "--masher-addresses sends from 127.0.0.x, which reaches only a server on "
                "this machine's loopback (a --url of 127.0.0.1 or localhost)"
            )
        if self.chaos_kill_every is not None:
            if self.chaos_kill_every <= 0:
                raise ValueError("--chaos-kill-every must be > 0")
            if not self.admin_token:
                raise ValueError(
                    "--chaos-kill-every needs the admin token (CODEMOJEX_ADMIN_TOKEN or "
                    "--admin-token)"
                )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["report"] = str(self.report) if self.report else None
        out.pop("admin_token")  # a secret: never written into a report
        return out
