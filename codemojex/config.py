"""Configuration: flags override ``CODEMOJEX_*`` environment variables override defaults.

Defaults serve the embedded single-machine game (``codemojex up``).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from codemojex.rules import DEFAULT_LENGTH, DEFAULT_PALETTE

GUESS_QUEUE = "guesses"
ROUND_QUEUE = "rounds"

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class ConfigError(ValueError):
    """A ``CODEMOJEX_*`` variable whose value cannot be read; the message names both."""


def env_name(field_name: str) -> str:
    """The environment variable of a :class:`Config` field."""
    return f"CODEMOJEX_{field_name.upper()}"


def parse_bool(name: str, raw: str) -> bool:
    """An on/off variable: a typo (``ture``) is an error, never quietly "off"."""
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(
        f"{name} must be one of {'/'.join(TRUE_WORDS + FALSE_WORDS[:-1])}, not {raw!r}"
    )


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
    valkey_url: str | None = None  # None: `up` starts the embedded server
    database_url: str | None = None  # None: SQLite in data_dir
    data_dir: Path = Path(".codemojex")
    round_seconds: int = 120
    score_delay_ms: int = 0
    lane_cap: int = 100  # guesses a player may have accepted and not yet scored
    # Per-player submission rate: a token bucket on the Valkey server clock, checked in the
    # enqueue script. guess_rate tokens a second (0 = off), at most guess_burst at once.
    guess_rate: float = 10.0
    guess_burst: int = 20
    length: int = DEFAULT_LENGTH
    palette: tuple[str, ...] = DEFAULT_PALETTE
    lease_ms: int = 10_000
    # A scoring handler still running after this long is cancelled and its guess failed
    # ("timed out", retried with backoff); 0 = no limit. Scoring takes milliseconds, but a
    # handler may wait its SQL batch out: SQLite's busy timeout (5 s) twice, behind another.
    score_timeout_ms: int = 60_000
    lapse_ms: int = 3_000  # heartbeat lapse after which a worker's jobs are reclaimed
    reap_interval_ms: int = 1_000
    # Handlers per worker process. The handlers' SQL writes share commits (GroupCommit), so a
    # batch is as big as the guesses scored at once: 32 lets one commit carry up to 32, and
    # equals the consumer's claim batch (one claim fills every free handler). bench_store
    # --drain, 2 workers on 2 cores, SQLite: 4 -> ~700 scored/s at 0.7 ms worker CPU/guess,
    # 32 -> 2,100-2,800/s at 0.14-0.21 ms; 64 and 128 were no faster and cost more CPU per
    # guess (more leases to extend, more tasks), and hold more guesses if a worker dies.
    concurrency: int = 32
    # Guesses a worker leases ahead of its free handlers. Each one sits in the worker's
    # local buffer outside the lanes' fair order, so an honest guess can wait behind it.
    prefetch: int = 0
    fifo: bool = False  # serve guesses from one FIFO queue instead of fair lanes
    # The guesses queue over this many slots (echomq.Partitioned): on a Valkey Cluster the
    # lanes spread over the masters. Every web and worker process must agree, so the first
    # process records it in Valkey and the others refuse a different count.
    partitions: int = 1
    admin_token: str | None = None
    # When set, /metrics (the web's, and each worker's --metrics-port) wants
    # "Authorization: Bearer <metrics_token>" and answers 401 without it; unset (or empty),
    # /metrics is public. The environment only (CODEMOJEX_METRICS_TOKEN): no flag, so the
    # token never shows in `ps`; `up` hands it to its children the same way.
    metrics_token: str | None = None
    allowed_origins: tuple[str, ...] = ()
    # Admission limits of a web process (0 = off). A page opens one socket; a few tabs
    # stay under the per-player cap. A resume further back than replay_max_events gets a
    # gap (the page refetches) instead of a replay that costs the server a long scan.
    sockets_per_player: int = 5
    # New players per client address: a token bucket in Valkey (0 = off). The burst lets a
    # load test or a classroom behind one address start a few hundred players at once.
    player_rate: float = 1.0
    player_burst: int = 300
    # The door of a web process (web/door.py), for /api/ requests. It works on at most
    # door_in_flight at once (0 = no door); the rest wait, lightest senders first, at most
    # door_wait_ms, and are shed with 503 overloaded, heaviest senders first. One client
    # address (an IPv6 address's /64) has at most address_in_flight requests at the door,
    # working or waiting (0 = off). Behind a proxy, only with forwarded_allow_ips set is
    # that the player's address and not the proxy's.
    door_in_flight: int = 16
    door_wait_ms: int = 500
    address_in_flight: int = 64
    # Proxies whose X-Forwarded-For names the client (comma-separated IPs/CIDRs, "*" for
    # any; uvicorn's forwarded_allow_ips). Empty: trust none, the client is the TCP peer.
    # A proxy in front must be listed, or every player it carries shares its address (and
    # its new-player bucket); a peer that is not listed cannot pick its address with the
    # header. uvicorn takes the rightmost untrusted entry, but with "*" the leftmost: the
    # one a client writes itself when the proxy appends ($proxy_add_x_forwarded_for).
    forwarded_allow_ips: str = ""
    sockets_per_process: int = 10_000
    replay_max_events: int = 10_000
    # Per client address (an IPv6 address counted by its /64; 0 = off): sockets in one
    # process, and resumes (after=) per minute that read the stream. A full process gives a
    # newcomer from an address under its fair share the newest socket of the address that
    # holds the most. The events resumes read are charged across connections: a player
    # may read 3 x replay_max_events a minute, an address 10 x (burst included).
    sockets_per_address: int = 1_000
    replays_per_minute: int = 60
    appendfsync: str = "always"
    # What a 202 for a guess promises (docs/reliability.md): "local", the master's AOF
    # (appendfsync); "replicated", also on a replica (WAIT 1 within replica_timeout_ms,
    # else 503 unavailable with Retry-After), so it survives the master's loss.
    durability: str = "local"
    replica_timeout_ms: int = 1_000
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 2
    # Web processes of `up` on one port (SO_REUSEPORT: the kernel spreads connections).
    # Each has its own hub reading every event, so every socket still gets each score once.
    web_processes: int = 1
    # A worker touches this file every couple of seconds while its event loop runs and
    # Valkey answers it; a container health check reads the file's age (compose.yaml).
    health_file: str | None = None
    # A worker's own /metrics (0 = off); under `up` its workers take consecutive ports from
    # here. The web process serves /metrics on its HTTP port and ignores both.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> Config:
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = env_name(f.name)
            raw = env.get(name)
            if raw is None or f.name == "extra":
                continue
            if f.name == "palette":
                values[f.name] = tuple(raw.split())
            elif f.name == "allowed_origins":
                values[f.name] = tuple(o for o in raw.replace(",", " ").split() if o)
            elif f.type == "bool":
                values[f.name] = parse_bool(name, raw)
            elif f.name == "data_dir":
                values[f.name] = Path(raw)
            elif f.type in ("int", "float"):
                try:
                    values[f.name] = int(raw) if f.type == "int" else float(raw)
                except ValueError:
                    kind = "a whole number" if f.type == "int" else "a number"
                    raise ConfigError(f"{name} must be {kind}, not {raw!r}") from None
            else:
                values[f.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

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
