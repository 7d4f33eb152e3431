"""What a mash run is asked to do (``codemojex mash``'s flags, or a caller's choices)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class MashOptions:
    url: str
    players: int = 200  # honest players
    mashers: int = 10
    duration: float = 60.0  # seconds of load; then submissions stop and the backlog drains
    masher_rate: float | None = None  # guesses per second per masher; None: as fast as taken
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
