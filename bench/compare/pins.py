"""The peers and their pinned versions: the one place they are stated.

Each peer gets a venv of its own (``venvs.py``), so its redis-py pin never meets ours: arq
0.28 pins ``redis<6``, this project runs redis-py 8.1. hiredis is pinned in every venv, the
version EchoMQ uses, so every client parses replies with the same C parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HIREDIS = "hiredis==3.5.0"


@dataclass(frozen=True)
class Peer:
    key: str  # the name on the command line, in the table and in the JSON
    module: str  # the driver, bench/compare/peers/<module>.py
    version: str  # the pinned version of the peer's own distribution ("" for echomq)
    requirements: tuple[str, ...] = ()  # what its venv installs; empty: this project's venv
    args: tuple[str, ...] = field(default=())  # extra driver arguments

    @property
    def ours(self) -> bool:
        return not self.requirements

    @property
    def venv_name(self) -> str:
        return f"{self.key}-{self.version}"


ECHOMQ = (
    Peer("echomq-lanes", "echomq", "", args=("--variant", "lanes", "--lanes", "100")),
    # Lanes holding what Dramatiq's worker holds by default: C handlers and C more
    # prefetched (its queue prefetch is 2 x worker_threads). The price is stated in
    # echomq.Consumer: a prefetched job waits behind its holder's running ones.
    Peer(
        "echomq-lanes-prefetch",
        "echomq",
        "",
        args=("--variant", "lanes", "--lanes", "100", "--prefetch", "concurrency"),
    ),
    Peer("echomq-plain", "echomq", "", args=("--variant", "plain")),
)

PEERS = (
    Peer("taskiq-redis", "taskiq", "1.2.4", ("taskiq-redis==1.2.4", "taskiq==0.13.0", HIREDIS)),
    Peer("dramatiq", "dramatiq", "2.2.1", ("dramatiq[redis]==2.2.1", HIREDIS)),
    # saq imports typing_extensions without declaring it; its redis extra pins redis<8.
    Peer("saq", "saq", "0.26.4", ("saq[redis,hiredis]==0.26.4", "typing-extensions==4.16.0")),
    Peer("arq", "arq", "0.28.0", ("arq==0.28.0", HIREDIS)),
    Peer("celery", "celery", "5.6.3", ("celery[redis]==5.6.3", "kombu==5.7.0", HIREDIS)),
    Peer("rq", "rq", "2.12.0", ("rq==2.12.0", HIREDIS)),
)

ALL = ECHOMQ + PEERS
BY_KEY = {p.key: p for p in ALL}
