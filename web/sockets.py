"""The sockets a web process holds, by player and by address, and who makes room when it is
full: a newcomer may take the newest socket of the largest group of addresses, so that no
address, nor one customer's many, keeps another's players out."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from codemojex.config import Config
from web.frames import CLOSE_TRY_AGAIN_LATER
from web.metrics import Metrics
from web.outbox import Connection

# The levels a full process groups client addresses by when it makes room: one customer
# of a provider commonly holds a /48 or a /56 of IPv6 addresses, and any of its /64s.
IPV6_GROUP_PREFIXES = (48, 56)


class Sockets:
    """The registry. ``conns`` and ``by_player`` are read in place by the hub's fan-out."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.conns: set[Connection] = set()
        self.by_player: dict[str, set[Connection]] = {}
        self.by_address: dict[str, dict[Connection, None]] = {}  # in the order they came

    def __len__(self) -> int:
        return len(self.conns)

    def admits(self, player_id: str, address: str = "") -> bool:
        """Whether one more socket of ``player_id`` from ``address`` (an
        :func:`~codemojex.admission.address_key`) fits under this process's limits.

        A full process does not simply refuse: a newcomer may take the newest socket of
        the largest group of addresses (:meth:`_displaced_by`), which is closed 1013 (its
        page reconnects later, as after a restart)."""
        cfg = self.config
        mine = self.by_player.get(player_id, ())
        if cfg.sockets_per_player and len(mine) >= cfg.sockets_per_player:
            return False
        held = len(self.by_address.get(address, ()))
        if cfg.sockets_per_address and held >= cfg.sockets_per_address:
            return False
        if not cfg.sockets_per_process or len(self.conns) < cfg.sockets_per_process:
            return True
        victim = self._displaced_by(address)
        if victim is None:
            return False
        self.leave(victim)
        victim.sink.close_now(CLOSE_TRY_AGAIN_LATER)
        self.metrics.sockets_displaced.inc()
        return True

    def _displaced_by(self, address: str) -> Connection | None:
        """The socket a newcomer from ``address`` takes in a full process, if any.

        Addresses are grouped as :func:`address_groups` says (an IPv6 /64 in its /56 in
        its /48): from the coarsest level down, a newcomer whose group holds nothing yet,
        or at least two fewer than the largest other group, takes a socket of that largest
        group; one whose group is the largest looks inside it at the next level; at the
        finest it is refused. Within the group it takes from, the victim is the newest
        socket of its largest subgroups, down to one address."""
        mine = address_groups(address)
        scope = list(self.by_address)
        for level, key in enumerate(mine):
            sizes = self._group_sizes(scope, level)
            held = sizes.pop(key, 0)
            if sizes:
                largest = max(sizes, key=sizes.__getitem__)
                if sizes[largest] > held:
                    if held and sizes[largest] <= held + 1:
                        return None  # taking one would only swap who is short
                    return self._newest_of(
                        [a for a in scope if _group(a, level) == largest], level + 1
                    )
            scope = [a for a in scope if _group(a, level) == key]
        return None

    def _group_sizes(self, addresses: Sequence[str], level: int) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for a in addresses:
            group = _group(a, level)
            sizes[group] = sizes.get(group, 0) + len(self.by_address[a])
        return sizes

    def _newest_of(self, addresses: list[str], level: int) -> Connection:
        """The newest socket of the largest subgroup of ``addresses`` at each level from
        ``level`` down, ending at one address."""
        while len(addresses) > 1:
            sizes = self._group_sizes(addresses, level)
            largest = max(sizes, key=sizes.__getitem__)
            addresses = [a for a in addresses if _group(a, level) == largest]
            level += 1
        return next(reversed(self.by_address[addresses[0]]))

    def join(self, conn: Connection) -> None:
        self.conns.add(conn)
        self.by_player.setdefault(conn.player_id, set()).add(conn)
        self.by_address.setdefault(conn.address, {})[conn] = None

    def leave(self, conn: Connection) -> None:
        self.conns.discard(conn)
        for index, key in ((self.by_player, conn.player_id), (self.by_address, conn.address)):
            held = index.get(key)
            if held is not None and conn in held:
                if isinstance(held, set):
                    held.discard(conn)
                else:
                    del held[conn]
                if not held:
                    del index[key]


@functools.lru_cache(maxsize=8192)
def address_groups(address: str) -> tuple[str, ...]:
    """The groups an :func:`~codemojex.admission.address_key` belongs to, coarsest first,
    itself last: an IPv6 /64 as its /48, its /56 and itself; anything else as itself.
    Cached: a full process's displacement groups every address it holds at each level."""
    if ":" not in address or "/" not in address:
        return (address,)
    try:
        net = ipaddress.IPv6Network(address)
    except ValueError:
        return (address,)
    wider = [str(net.supernet(new_prefix=p)) for p in IPV6_GROUP_PREFIXES if p < net.prefixlen]
    return (*wider, address)


def _group(address: str, level: int) -> str:
    groups = address_groups(address)
    return groups[min(level, len(groups) - 1)]
