"""The ``codemojex`` command: ``up`` (the whole game on one machine), ``web``, ``worker``,
``migrate``, ``mash`` (the load script).

Configuration comes from flags over ``CODEMOJEX_*`` environment variables over defaults
(:meth:`Config.from_env`). Each setting is declared once, in codemojex.config; the flags
below, their help, the variables, the checks and what ``up`` hands its children through
the same variables (so every process agrees on the URLs and the admin token) are derived
from it by codemojex.settings. The roles run in codemojex.roles and codemojex.up, after the
checks of codemojex.launch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from codemojex import roles, settings, up
from codemojex.config import Config, ConfigError, ProcessOptions
from codemojex.launch import Fatal, options_of


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag costs one line on stderr (and where to look), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("codemojex")
    except PackageNotFoundError:  # a bare checkout on sys.path
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The full ``codemojex`` parser (also used by tests/test_compose.py to check commands).

    Every flag that a ``CODEMOJEX_*`` variable can also set names it in its help."""
    parser = _Parser(
        prog="codemojex",
        description="Real-time many-player emoji Mastermind on EchoMQ. Flags override "
        "CODEMOJEX_* environment variables, which override the defaults.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # Every flag of these four comes from a setting's one declaration (codemojex.config).
    helps = {
        "up": "the whole game on one machine",
        "web": "one web server",
        "worker": "one ScoreWorker",
        "migrate": "alembic upgrade head",
    }
    runs = {"up": up.run, "web": roles.web, "worker": roles.worker, "migrate": roles.migrate}
    for name, what in helps.items():
        role = sub.add_parser(name, help=what)
        settings.add_flags(role, name, ProcessOptions, Config)
        role.set_defaults(run=runs[name])

    from codemojex.mash import command as mash_command  # import-light: flags only

    mash = sub.add_parser("mash", help="keyboard mashers and chaos against a running game")
    mash_command.add_arguments(mash)
    mash.set_defaults(run=mash_command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = build_parser().parse_args(argv)
    from codemojex.logs import configure

    try:
        options = options_of(args)
        level = options.log_level or ("warning" if args.command == "mash" else "info")
        args.log_level = level
        configure(level, "json" if options.log_format == "json" else "text")
        code = args.run(args)
    except Fatal as e:
        print(f"codemojex: {e}", file=sys.stderr)
        code = e.code
    except ConfigError as e:  # a CODEMOJEX_* variable that cannot be read: one line
        print(f"codemojex: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
