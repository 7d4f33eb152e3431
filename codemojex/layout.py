"""The guesses queue's layout (its partition count), recorded in Valkey once per game.

A web process puts a player's guesses on partition ``crc32(player) % N`` and a worker
claims from the N partitions it knows: a web process and a worker that disagree on N
strand guesses where no worker looks, and a game whose N changes mid-round restarts its
players' ``seq`` on their new partition. So the first process to reach Valkey records
N (``SET NX``) and every process compares its own against it: a different count is a
configuration error, said at start-up, never a silent split.

To change N: stop every process and start from an empty Valkey (the scores stay in SQL).
"""

from __future__ import annotations

from typing import Any

from codemojex import keys
from codemojex.config import ConfigError


class LayoutMismatch(ConfigError):
    """This process's ``--partitions`` differs from the game's recorded in Valkey."""

    def __init__(self, mine: int, recorded: int) -> None:
        super().__init__(
            f"this game's guesses queue has {recorded} partition(s) (recorded in Valkey at "
            f"{keys.LAYOUT}) and this process was started with --partitions {mine}: start "
            f"every process with CODEMOJEX_PARTITIONS={recorded}, or stop them all and use "
            "an empty Valkey to change it"
        )
        self.mine = mine
        self.recorded = recorded


def _judge(mine: int, previous: Any) -> None:
    if previous is None:
        return  # we recorded it
    recorded = int(previous.decode() if isinstance(previous, bytes) else previous)
    if recorded != mine:
        raise LayoutMismatch(mine, recorded)


async def agree(conn: Any, partitions: int) -> None:
    """Record ``partitions`` if no process has yet; :class:`LayoutMismatch` if another
    count was recorded. One command (``SET … NX GET``), on any client."""
    _judge(partitions, await conn.set(keys.LAYOUT, partitions, nx=True, get=True))


def agree_sync(conn: Any, partitions: int) -> None:
    """:func:`agree` on a synchronous client (``codemojex up`` before its children)."""
    _judge(partitions, conn.set(keys.LAYOUT, partitions, nx=True, get=True))
