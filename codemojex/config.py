"""Configuration: flags override ``CODEMOJEX_*`` environment variables override defaults.

Defaults serve the embedded single-machine game (``codemojex up``). Each setting is one
field, declared once with :func:`codemojex.settings.setting`: its flags (and which
commands have them), their help with the default, its variable, its bounds and whether
``up`` hands it to its children all come from that declaration (codemojex.settings).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from codemojex import settings
from codemojex.rules import DEFAULT_LENGTH, DEFAULT_PALETTE
from codemojex.settings import ConfigError, env_name, parse_bool, setting

__all__ = [
    "Config",
    "ConfigError",
    "ProcessOptions",
    "env_name",
    "parse_bool",
    "parse_forwarded_allow_ips",
]

GUESS_QUEUE = "guesses"
ROUND_QUEUE = "rounds"

# The commands that have a flag for a setting.
ALL = ("up", "web", "worker", "migrate")
GAME = ("up", "web", "worker")  # play: rounds, lanes, rate limits
SCORING = ("up", "worker")  # score guesses, and serve a worker's /metrics
SERVING = ("up", "web")  # answer HTTP
UP = ("up",)
WEB = ("web",)
WORKER = ("worker",)

LOG_LEVELS = ("debug", "info", "warning", "error")
DURABILITY = ("local", "replicated")
MAX_PARTITIONS = 64  # a worker runs a consumer per partition: more would be idle slots


def parse_forwarded_allow_ips(raw: str, name: str = "CODEMOJEX_FORWARDED_ALLOW_IPS") -> str:
    """``raw`` as uvicorn's ``forwarded_allow_ips``: comma-separated IPs and CIDRs, or ``*``.

    uvicorn keeps an entry it cannot parse as a literal that no client address ever equals,
    so a typo would quietly trust nothing; here it is an error that names the entry."""
    entries = [e.strip() for e in raw.replace(" ", ",").split(",") if e.strip()]
    if entries == ["*"]:
        return "*"
    for entry in entries:
        try:
            if "/" in entry:
                ipaddress.ip_network(entry)
            else:
                ipaddress.ip_address(entry)
        except ValueError:
            raise ConfigError(
                f"{name} must be comma-separated IP addresses or networks (CIDR), "
                f"or * alone, not {entry!r}"
            ) from None
    return ",".join(entries)


@dataclass(frozen=True, slots=True)
class Config:
    """Everything a web or worker process needs, and what ``up`` hands its children."""

    valkey_url: str | None = setting(
        None, help="an external Valkey", shown="`up` then starts none", flag_of=ALL
    )  # None: `up` starts the embedded server
    database_url: str | None = setting(
        None, help="SQL database", shown="default: SQLite in the data dir", flag_of=ALL
    )
    # setting() is dataclasses.field() with a declaration (RUF009 sees only a call).
    data_dir: Path = setting(  # noqa: RUF009
        Path(".codemojex"), help="Valkey's AOF, the SQLite file, the admin token", flag_of=ALL
    )
    round_seconds: int = setting(
        120, help="how long each round stays open, in seconds", flag_of=GAME
    )
    score_delay_ms: int = setting(
        0,
        help="make every score take at least this long, so a kill lands mid-score",
        flag_of=SCORING,
    )
    # lane_cap, guess_rate/guess_burst and player_rate/player_burst: what the game admits,
    # taken by every check as one codemojex.admission.Limits.
    lane_cap: int = setting(
        100, help="guesses a player may have accepted and not yet scored", flag_of=GAME
    )
    guess_rate: float = setting(
        10.0,
        help="guesses a second per player, a token bucket on the Valkey clock",
        zero="no limit",
        minimum=0,
        flag_of=GAME,
    )
    guess_burst: int = setting(
        20,
        help="guesses a player may send at once before --guess-rate applies",
        minimum=1,
        only_if="guess_rate",
        checked_with="guess_rate",
        flag_of=GAME,
    )
    length: int = setting(DEFAULT_LENGTH)
    palette: tuple[str, ...] = setting(DEFAULT_PALETTE)
    lease_ms: int = setting(10_000)
    # A scoring handler still running after this long is cancelled and its guess failed
    # ("timed out", retried with backoff); 0 = no limit. Scoring takes milliseconds, but a
    # handler may wait its SQL batch out: SQLite's busy timeout (5 s) twice, behind another.
    score_timeout_ms: int = setting(60_000)
    lapse_ms: int = setting(3_000)  # heartbeat lapse after which a worker's jobs are reclaimed
    reap_interval_ms: int = setting(1_000)
    # Handlers per worker process. The handlers' SQL writes share commits (GroupCommit), so a
    # batch is as big as the guesses scored at once: 32 lets one commit carry up to 32, and
    # equals the consumer's claim batch (one claim fills every free handler). bench_store
    # --drain, 2 workers on 2 cores, SQLite: 4 -> ~700 scored/s at 0.7 ms worker CPU/guess,
    # 32 -> 2,100-2,800/s at 0.14-0.21 ms; 64 and 128 were no faster and cost more CPU per
    # guess (more leases to extend, more tasks), and hold more guesses if a worker dies.
    concurrency: int = setting(
        32, help="guesses scored at once per worker process", minimum=1, flag_of=SCORING
    )
    # How long a worker's SQL batch waits for more scores before it commits: a commit's
    # fixed cost (fsync, writer lock, thread hop) is shared by what arrives meanwhile. At
    # 300 guesses/s a commit otherwise carries one score; the latency it adds is this.
    commit_linger_ms: int = setting(
        5,
        help="longest a worker's score batch waits for more scores before it commits",
        zero="commit at once",
        minimum=0,
        metavar="MS",
        flag_of=SCORING,
    )
    # Guesses a worker leases ahead of its free handlers. Each one sits in the worker's
    # local buffer outside the lanes' fair order, so an honest guess can wait behind it.
    prefetch: int = setting(
        0,
        help="guesses leased ahead of free handlers per worker process",
        minimum=0,
        checked_with="concurrency",
        flag_of=SCORING,
    )
    fifo: bool = setting(
        False,
        help="serve every guess from one FIFO queue instead of fair lanes",
        flag_of=GAME,
    )
    # The guesses queue over this many slots (echomq.Partitioned): on a Valkey Cluster the
    # lanes spread over the masters. Every web and worker process must agree, so the first
    # process records it in Valkey and the others refuse a different count.
    partitions: int = setting(
        1,
        help="spread the guesses queue over N slots, for a Valkey Cluster; every process "
        "of a game must agree",
        minimum=1,
        maximum=MAX_PARTITIONS,
        flag_of=GAME,
    )
    admin_token: str | None = setting(None)
    # When set, /metrics (the web's, and each worker's --metrics-port) wants
    # "Authorization: Bearer <metrics_token>" and answers 401 without it; unset (or empty),
    # /metrics is public. The environment only (CODEMOJEX_METRICS_TOKEN): no flag, so the
    # token never shows in `ps`; `up` hands it to its children the same way.
    metrics_token: str | None = setting(None)
    allowed_origins: tuple[str, ...] = setting((), commas=True)
    # Admission limits of a web process (0 = off). A page opens one socket; a few tabs
    # stay under the per-player cap. A resume further back than replay_max_events gets a
    # gap (the page refetches) instead of a replay that costs the server a long scan.
    sockets_per_player: int = setting(5)
    # The new-player burst lets a load test or a classroom behind one address start a few
    # hundred players at once.
    player_rate: float = setting(1.0)
    player_burst: int = setting(300)
    # The door of a web process (web.door), for /api/ requests. 32: concurrent enqueues
    # share a pipeline (echomq.coalesce), so a slot costs no Valkey connection of its own,
    # and at 16 the bound, not the CPU, held bench_game at 2,000/s offered to 1,201-1,428
    # accepted/s (32: 1,484-1,679, no 503s, same runs). It works on at most
    # door_in_flight at once (0 = no door); the rest wait, lightest senders first, at most
    # door_wait_ms, and are shed with 503 overloaded, heaviest senders first. One client
    # address (an IPv6 address's /64) has at most address_in_flight requests at the door,
    # working or waiting, whatever their path (pages, health, socket handshakes too; 0 = off). Behind a proxy, only with forwarded_allow_ips set is
    # that the player's address and not the proxy's.
    door_in_flight: int = setting(
        32,
        help="API requests one web process works on at once; more wait, lightest senders first",
        zero="no bound",
        minimum=0,
        metavar="N",
        flag_of=SERVING,
    )
    door_wait_ms: int = setting(
        500,
        help="longest a request waits at the door before 503 overloaded",
        minimum=0,
        checked_with="door_in_flight",
        metavar="MS",
        flag_of=SERVING,
    )
    address_in_flight: int = setting(
        64,
        help="requests one client address (an IPv6 /64) may have at a web process, "
        "working or waiting (any path, socket handshakes included)",
        zero="off",
        minimum=0,
        checked_with="door_in_flight",
        metavar="N",
        flag_of=SERVING,
    )
    # Proxies whose X-Forwarded-For names the client (comma-separated IPs/CIDRs, "*" for
    # any; uvicorn's forwarded_allow_ips). Empty: trust none, the client is the TCP peer.
    # A proxy in front must be listed, or every player it carries shares its address (and
    # its new-player bucket); a peer that is not listed cannot pick its address with the
    # header. uvicorn takes the rightmost untrusted entry, but with "*" the leftmost: the
    # one a client writes itself when the proxy appends ($proxy_add_x_forwarded_for).
    forwarded_allow_ips: str = setting(
        "",
        help="proxies whose X-Forwarded-For names the client, comma-separated IPs/CIDRs or *",
        shown="none: the client is the TCP peer",
        normalize=lambda raw, name: parse_forwarded_allow_ips(raw, name),
        metavar="IPS",
        flag_of=SERVING,
    )
    sockets_per_process: int = setting(10_000)
    replay_max_events: int = setting(10_000)
    # Per client address (an IPv6 address counted by its /64; 0 = off): sockets in one
    # process, and resumes (after=) per minute that read the stream. A full process gives a
    # newcomer from an address under its fair share the newest socket of the address that
    # holds the most. The events resumes read are charged across connections: a player
    # may read 3 x replay_max_events a minute, an address 10 x (burst included).
    sockets_per_address: int = setting(1_000)
    # TCP connections one client address (the TCP peer; an IPv6 /64) may hold open at a
    # web process, websockets included (0 = off); more are closed at accept. A proxy named
    # in forwarded_allow_ips is not capped as one address. Cut to half of what the
    # open-files limit allows, with a log line (web.connections.plan_connections).
    connections_per_address: int = setting(2_000, minimum=0)
    replays_per_minute: int = setting(60)
    appendfsync: str = setting(
        "always",
        help="the embedded Valkey's durability dial",
        choices=("always", "everysec", "no"),
        flag_of=UP,
    )
    # What a 202 for a guess promises (docs/reliability.md): "local", the master's AOF
    # (appendfsync); "replicated", also on a replica (WAIT 1 within replica_timeout_ms,
    # else 503 unavailable with Retry-After), so it survives the master's loss.
    durability: str = setting(
        "local",
        help="local: a 202 guess is on the master's AOF; replicated: also on a replica "
        "(WAIT), else 503",
        choices=DURABILITY,
        flag_of=WEB,
    )
    replica_timeout_ms: int = setting(1_000, minimum=1)
    # host, port and workers are up's business: it gives its web processes --host and
    # --port as flags, and starts the workers itself.
    host: str = setting(
        "127.0.0.1", help="address to listen on", flag_of=SERVING, handed_down=False
    )
    port: int = setting(8000, help="HTTP port", flag_of=SERVING, handed_down=False)
    workers: int = setting(
        2, help="ScoreWorker processes", minimum=0, flag_of=UP, handed_down=False
    )
    # Web processes of `up` on one port (SO_REUSEPORT: the kernel spreads connections).
    # Each has its own hub reading every event, so every socket still gets each score once.
    web_processes: int = setting(
        1, help="web server processes sharing the port", minimum=1, flag_of=UP
    )
    # A worker touches this file every couple of seconds while its event loop runs and
    # Valkey answers it; a container health check reads the file's age (compose.yaml).
    health_file: str | None = setting(None)
    # A worker's own /metrics (0 = off); under `up` its workers take consecutive ports from
    # here. The web process serves /metrics on its HTTP port and ignores both.
    metrics_port: int = setting(
        0,
        help="serve a worker's /metrics on this port; under `up` its workers take this port "
        "and the next ones, one each",
        zero="off",
        minimum=0,
        maximum=65535,
        flag_of=SCORING,
    )
    metrics_host: str = setting(
        "127.0.0.1", help="address a worker's /metrics listens on", flag_of=SCORING
    )
    extra: dict[str, Any] = setting({}, variable=False, handed_down=False)  # noqa: RUF009

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Flags (``overrides``, by field name; None = not given) over ``env`` (the
        process's environment by default) over defaults, checked: a value that cannot be
        read or is out of bounds raises :class:`ConfigError`."""
        return settings.read(cls, os.environ if env is None else env, overrides)

    def to_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with this configuration as the ``CODEMOJEX_*`` variables that
        :meth:`from_env` reads back, but for what ``up`` keeps to itself (host, port,
        workers): the environment ``up`` gives its children."""
        return settings.to_env(self, env)

    def with_(self, **changes: Any) -> Config:
        return replace(self, **changes)

    @property
    def sql_url(self) -> str:
        from codemojex.store import sqlite_url

        return self.database_url or sqlite_url(self.data_dir)

    def resolve_admin_token(self) -> str:
        """``CODEMOJEX_ADMIN_TOKEN`` if set, else the one generated once into the data dir."""
        if self.admin_token:
            return self.admin_token
        path = self.data_dir / "admin_token"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(24)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(token + "\n")
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)  # atomic create-if-absent: concurrent starters agree on one
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return path.read_text().strip()


@dataclass(frozen=True, slots=True)
class ProcessOptions:
    """Settings of one process that are not :class:`Config`'s: ``up`` gives its children
    the log settings as flags, and each child has its own worker id."""

    log_level: str | None = setting(
        None,
        help="how much to log",
        shown="info; mash: warning",
        choices=LOG_LEVELS,
        flag_of=ALL,
        handed_down=False,
    )
    log_format: str = setting(
        "text",
        help="text for people, json (one object a line) for log pipelines",
        choices=("text", "json"),
        flag_of=ALL,
        handed_down=False,
    )
    access_log: bool = setting(False, help="log every request", flag_of=WEB, handed_down=False)
    worker_id: str | None = setting(
        None, help="WRK_… id", shown="default: a new one", flag_of=WORKER, handed_down=False
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **flags: Any) -> ProcessOptions:
        return settings.read(cls, os.environ if env is None else env, flags)
