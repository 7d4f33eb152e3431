"""``codemojex mash``: keyboard mashers, honest players and chaos against a running game.

Honest players and mashers play through the public HTTP and WebSocket API while, on
request, a scoring worker is killed every few seconds; afterwards every ``202``-accepted
guess is checked — scored exactly once, on its player's socket and in the API — and the
verdict line ``lost: 0, doubled: 0, …`` is printed. See docs/load.md.

This module stays light (the CLI imports it for every command); the client machinery is
imported when a run starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codemojex.mash.options import MashOptions

if TYPE_CHECKING:
    from codemojex.mash.run import MashResult

__all__ = ["MashOptions", "MashResult", "run_mash"]


async def run_mash(options: MashOptions) -> MashResult:
    """Run the load, drain the backlog, judge it; see :mod:`codemojex.mash.run`."""
    from codemojex.mash.run import run

    return await run(options)


def __getattr__(name: str) -> object:
    if name == "MashResult":
        from codemojex.mash.run import MashResult

        return MashResult
    raise AttributeError(name)
