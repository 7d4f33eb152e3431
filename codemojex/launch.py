"""What every ``codemojex`` command does before it starts anything: its configuration from
flags over ``CODEMOJEX_*`` variables over defaults, the environment ``up`` hands its children,
the checks on Valkey (reachable, durable, the game's layout) and SQL (migrated), and
:class:`Fatal`, the operator's one line when a check fails.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from codemojex import settings
from codemojex.config import Config, ProcessOptions


class Fatal(Exception):
    """A one-line message for the operator instead of a traceback, and an exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def options_of(args: argparse.Namespace) -> ProcessOptions:
    """This process's own settings: flags over CODEMOJEX_* over defaults."""
    return ProcessOptions.from_env(**settings.given(args, ProcessOptions))


def config_of(args: argparse.Namespace) -> Config:
    """Flags over CODEMOJEX_* over defaults, checked (codemojex.settings.check)."""
    return Config.from_env(**settings.given(args, Config))


def child_env(config: Config) -> dict[str, str]:
    """Our environment plus the resolved configuration as CODEMOJEX_* variables."""
    return config.to_env(os.environ)


def require_valkey(config: Config, command: str) -> str:
    """The role's Valkey URL; a server that answers must be durable. One that does not
    answer yet is no reason to stop: web answers 503 and workers retry until it is up."""
    if not config.valkey_url:
        raise Fatal(
            f"`codemojex {command}` needs --valkey-url (or CODEMOJEX_VALKEY_URL); "
            "`codemojex up` runs everything on one machine"
        )
    check_external(config.valkey_url, unreachable_ok=True)
    agree_on_layout(config, unreachable_ok=True)
    return config.valkey_url


def private_files(config: Config, *, admin_token: bool = False) -> None:
    """Every file this process creates is its owner's alone, as under ``up``: the SQLite
    file (it holds the open round's secret) and its journals, the generated admin token.
    The data dir, where one of them lives (SQLite by default; the admin token when
    ``admin_token`` and none is set), is made private (0700), created so if need be."""
    os.umask(0o077)
    if config.database_url is not None and not (admin_token and not config.admin_token):
        return  # nothing of this process lives in the data dir
    data_dir = config.data_dir.expanduser()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    except OSError as e:
        raise Fatal(f"cannot make the data dir {data_dir} private: {e}") from None


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for printing."""
    return re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url)


def check_external(url: str, *, unreachable_ok: bool = False) -> None:
    import redis

    from echomq.connection import node_urls
    from echomq.errors import NotDurable
    from echomq.server import check_durable_sync

    conn: Any = None
    where = url  # the node a refusal names
    timeouts = {"socket_timeout": 5, "socket_connect_timeout": 5}
    try:
        # On a cluster, every node, replicas too: any of them may be a master tomorrow.
        for where in node_urls(url, **timeouts):
            conn = redis.Redis.from_url(where, **timeouts)
            check_durable_sync(conn)
            conn.close()
            conn = None
    except NotDurable as e:
        raise Fatal(f"refusing {redact(where)}: {e}") from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        if not unreachable_ok:
            raise Fatal(f"cannot reach Valkey at {redact(url)}: {e}") from None
        print(
            f"codemojex: Valkey at {redact(url)} is not reachable yet ({e}); "
            "carrying on, its durability unchecked",
            file=sys.stderr,
        )
    except redis.RedisError as e:
        raise Fatal(f"cannot use Valkey at {redact(url)}: {e}") from None
    finally:
        if conn is not None:
            conn.close()


def agree_on_layout(config: Config, *, unreachable_ok: bool = False) -> None:
    """Before anything starts: this game's queue partitions are the ones recorded in
    Valkey (a game of another layout is refused, with what to do). A web or worker whose
    Valkey does not answer yet checks again once it does (web: on the first guess)."""
    import redis
    from redis.exceptions import RedisClusterException

    from codemojex.layout import LayoutMismatch, agree_sync
    from echomq.connection import connect_sync

    assert config.valkey_url
    conn: Any = None
    try:
        conn = connect_sync(config.valkey_url, socket_timeout=5, socket_connect_timeout=5)
        agree_sync(conn, config.partitions)
    except LayoutMismatch as e:
        raise Fatal(str(e)) from None
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as e:
        if not unreachable_ok:
            raise Fatal(f"cannot reach Valkey at {redact(config.valkey_url)}: {e}") from None
    except redis.RedisError as e:
        raise Fatal(f"cannot use Valkey at {redact(config.valkey_url)}: {e}") from None
    finally:
        if conn is not None:
            conn.close()


def migrate_or_fail(url: str) -> None:
    from codemojex.store import migrate

    try:
        migrate(url)
    except Exception as e:  # noqa: BLE001 - one line for the operator
        raise Fatal(f"migrating {redact(url)} failed: {type(e).__name__}: {e}", 1) from None
