"""A real local Valkey Cluster for tests, from the same ``valkey-server`` binary as the rest.

    cluster = ValkeyCluster(root, masters=3, replicas=1)
    cluster.start()           # slots split evenly, replicas synced, cluster_state:ok everywhere
    cluster.url               # redis://127.0.0.1:PORT/0?cluster=true  (echomq.connect reads it)
    conn = cluster.client()   # a redis.asyncio.RedisCluster
    cluster.master_of(key)    # the node serving key's slot now
    cluster.stop()

Every node is an :class:`EmbeddedValkey` (AOF on, noeviction, ``PR_SET_PDEATHSIG``) with
``cluster-enabled yes``, on a loopback port at or below 55535: a node's cluster bus listens
10,000 above its port. The cluster is formed from Python (``CLUSTER ADDSLOTSRANGE``,
``MEET``, ``REPLICATE``) rather than ``valkey-cli --cluster create``, which polls once a
second and is not in every install.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from echomq.connection import connect
from echomq.server import Appendfsync, EmbeddedValkey

SLOTS = 16_384
_BUS_OFFSET = 10_000
_MAX_PORT = 65_535 - _BUS_OFFSET
_NODE_MEMORY = 128 * 1024**2


def cluster_port(taken: set[int] | None = None) -> int:
    """A free loopback port a cluster node can use: at most 55535, its bus port free too."""
    taken = taken or set()
    for _ in range(500):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port > _MAX_PORT or port in taken or port + _BUS_OFFSET in taken:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + _BUS_OFFSET))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port at or below {_MAX_PORT} for a cluster node")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster: {what} not within {timeout:g} s")
        time.sleep(0.05)


def _slot_table(nodes: str) -> list[tuple[int, int, int, list[int]]]:
    """Slot ranges with their master's port and its live replicas' ports, from CLUSTER NODES
    (``id host:port@bus flags master_id ping pong epoch link slot...``)."""
    ports: dict[str, int] = {}
    replicas: dict[str, list[int]] = {}
    ranges: list[tuple[int, int, str]] = []
    for line in nodes.splitlines():
        f = line.split()
        node_id, port, flags = f[0], int(f[1].split("@")[0].rsplit(":", 1)[1]), f[2]
        ports[node_id] = port
        if "fail" in flags.split(",") or "noaddr" in flags:
            continue
        if "slave" in flags:
            replicas.setdefault(f[3], []).append(port)
        for slot in f[8:]:
            if slot.startswith("["):  # a slot being migrated or imported
                continue
            first, _, last = slot.partition("-")
            ranges.append((int(first), int(last or first), node_id))
    return [
        (first, last, ports[owner], sorted(replicas.get(owner, [])))
        for first, last, owner in sorted(ranges)
    ]


class ValkeyCluster:
    """``masters`` masters sharing the 16,384 slots evenly, each with ``replicas`` replicas."""

    def __init__(
        self,
        root: Path,
        *,
        masters: int = 3,
        replicas: int = 0,
        appendfsync: Appendfsync = "always",
        node_timeout_ms: int = 5_000,
        extra_config: dict[str, str] | None = None,
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("at least one master, and replicas >= 0")
        self.root = root
        self.masters_count = masters
        self.replicas_count = replicas
        taken: set[int] = set()
        self.nodes: list[EmbeddedValkey] = []
        for i in range(masters * (1 + replicas)):
            port = cluster_port(taken)
            taken |= {port, port + _BUS_OFFSET}
            self.nodes.append(
                EmbeddedValkey(
                    root / f"node{i}",
                    port=port,
                    appendfsync=appendfsync,
                    maxmemory=_NODE_MEMORY,
                    extra_config={
                        "cluster-enabled": "yes",
                        "cluster-config-file": "nodes.conf",
                        "cluster-node-timeout": str(node_timeout_ms),
                        # A replica may always take over, however long it was cut off.
                        "cluster-replica-validity-factor": "0",
                        # A new replica syncs at once (the default waits 5 s for others).
                        "repl-diskless-sync-delay": "0",
                        **(extra_config or {}),
                    },
                )
            )
        self.ids: dict[int, str] = {}  # port -> node id

    # -- addresses -------------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        return [int(n.port or 0) for n in self.nodes]

    @property
    def url(self) -> str:
        """A seed node's URL marked as a cluster (``echomq.connect`` builds a RedisCluster)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0?cluster=true"

    def client(self, **kwargs: Any) -> RedisCluster:
        """The client EchoMQ builds for ``url`` (``echomq.connect``)."""
        conn = connect(self.url, **kwargs)
        assert isinstance(conn, RedisCluster)
        return conn

    def admin(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=2)

    def node(self, port: int) -> EmbeddedValkey:
        return next(n for n in self.nodes if n.port == port)

    # -- topology ----------------------------------------------------------------------------

    def slots(self, via: int | None = None) -> list[tuple[int, int, int, list[int]]]:
        """``(first, last, master port, replica ports)`` per slot range, as ``via`` (or the
        first live node) sees it in ``CLUSTER NODES`` (``CLUSTER SLOTS`` leaves out a
        replica that has not replicated a byte yet)."""
        for port in [via] if via else self.live_ports():
            with self.admin(port) as conn:
                try:
                    raw = conn.execute_command("CLUSTER", "NODES")
                except redis.ConnectionError:
                    continue
            return _slot_table(raw.decode() if isinstance(raw, bytes) else str(raw))
        raise RuntimeError("no live cluster node")

    def master_of(self, key: str, via: int | None = None) -> int:
        slot = key_slot(key.encode())
        for first, last, master, _ in self.slots(via):
            if first <= slot <= last:
                return master
        raise LookupError(f"slot {slot} is not served")

    def replicas_of(self, master: int, via: int | None = None) -> list[int]:
        for _, _, port, replicas in self.slots(via):
            if port == master:
                return replicas
        return []

    def live_ports(self) -> list[int]:
        return [int(n.port or 0) for n in self.nodes if n.is_running()]

    def info(self, port: int, section: str) -> dict[str, Any]:
        with self.admin(port) as conn:
            return dict(conn.info(section))

    def is_ok(self, port: int) -> bool:
        with self.admin(port) as conn:
            return b"cluster_state:ok" in conn.execute_command("CLUSTER", "INFO")

    def role(self, port: int) -> str:
        return str(self.info(port, "replication")["role"])

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        for n in self.nodes:
            n.start()
        ports = self.ports
        for port in ports:
            with self.admin(port) as conn:
                self.ids[port] = conn.execute_command("CLUSTER", "MYID").decode()
        masters, replicas = ports[: self.masters_count], ports[self.masters_count :]
        per = SLOTS // len(masters)
        for i, port in enumerate(masters):
            last = SLOTS - 1 if i == len(masters) - 1 else (i + 1) * per - 1
            with self.admin(port) as conn:
                conn.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for port in ports[1:]:
            with self.admin(port) as conn:
                conn.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])

        def everyone_knows_everyone() -> bool:
            for port in ports:
                with self.admin(port) as conn:
                    lines = conn.execute_command("CLUSTER", "NODES").decode().splitlines()
                if len(lines) != len(ports) or any("handshake" in line for line in lines):
                    return False
            return True

        wait_until(everyone_knows_everyone, timeout, "every node knows every other")
        # Replica k of master m is node masters + m * replicas + k.
        for m, master in enumerate(masters):
            for k in range(self.replicas_count):
                port = replicas[m * self.replicas_count + k]
                with self.admin(port) as conn:
                    conn.execute_command("CLUSTER", "REPLICATE", self.ids[master])
        for port in replicas:
            wait_until(
                functools.partial(self._replica_synced, port), timeout, f"replica {port} synced"
            )
        self.wait_ok(timeout)

    def _replica_synced(self, port: int) -> bool:
        return bool(self.info(port, "replication").get("master_link_status") == "up")

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node says ``cluster_state:ok`` and sees every replica."""

        def ok() -> bool:
            for port in self.live_ports():
                if not self.is_ok(port):
                    return False
                served = self.slots(port)
                if sum(last - first + 1 for first, last, _, _ in served) != SLOTS:
                    return False
            return True

        wait_until(ok, timeout, "cluster_state:ok on every node")

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def kill(self, port: int) -> None:
        """SIGKILL one node, as a crash would."""
        self.node(port).kill()

    def promote(self, replica: int, timeout: float = 30.0) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica``: it takes its master's slots now,
        without the master's agreement (the master is dead), then wait for every live node
        to agree."""
        with self.admin(replica) as conn:
            conn.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_until(
            lambda: self.role(replica) == "master",
            timeout,
            f"{replica} promoted",
        )
        self.wait_ok(timeout)
