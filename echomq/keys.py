"""Every key name of a queue, built in exactly one place.

All keys of queue ``q`` share the prefix ``emq:{q}:``; the braces are a Valkey Cluster
hash tag, so a queue lives in one slot and every script touches one slot.

Every script is handed the keys it touches in ``KEYS`` (what Valkey asks of a script, and
what lets a cluster check them): ``KEYS[1]`` the prefix, then the call's own keys (a job's
row, a lane …), then the queue's static keys the script uses (``SCRIPT_KEYS``, in that
order). Only keys named by data the script reads are built in Lua from the prefix, with
the same suffixes as below: a job's row, lane or holder's set from an id or a name popped
or read from a row (``lua/include/common.lua`` says which and why;
tests/echomq/test_keys.py checks the two sides agree).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# The queue's static keys each script touches, as ``Keys`` property names, in the order the
# script reads them from ``KEYS`` right after its own keys (each script's first lines
# unpack them; tests/echomq/test_keys.py checks every script declares exactly the keys
# its code and the helpers it calls use).
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "claim": (
        "new", "pending", "active", "scheduled", "dead", "counters", "events", "wake",
        "workers", "in_lanes", "foreign",
    ),
    "complete": ("active", "completed", "counters", "refused", "events"),
    "discard": ("dead", "counters"),
    "enqueue": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "extend": ("active", "refused"),
    "fail": ("active", "scheduled", "dead", "counters", "refused", "events", "wake"),
    "heartbeat": ("active", "counters", "events", "workers", "swept"),
    "lane_claim": (
        "new", "ring", "owed", "pending", "active", "scheduled", "dead", "counters", "events",
        "wake", "workers", "in_lanes", "foreign",
    ),
    "lane_enqueue": ("new", "pending", "counters", "wake", "in_lanes", "foreign"),
    "promote": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "reap": (
        "new", "pending", "active", "scheduled", "dead", "counters", "events", "wake",
        "workers", "in_lanes", "swept", "reaper", "foreign",
    ),
    "release": ("new", "pending", "active", "counters", "refused", "wake", "in_lanes", "foreign"),
    "retry_dead": ("new", "pending", "dead", "counters", "wake", "in_lanes", "foreign"),
    "stats": (
        "new", "ring", "pending", "active", "scheduled", "completed", "dead", "counters",
        "refused", "in_lanes",
    ),
    "unfinished": ("foreign",),
    "unregister": ("workers", "reaper"),
}  # fmt: skip


@functools.cache
def _static(name: str, script: str) -> tuple[str, ...]:
    keys = Keys(name)
    return tuple(getattr(keys, attr) for attr in SCRIPT_KEYS[script])


@dataclass(frozen=True, slots=True)
class Keys:
    name: str

    @property
    def prefix(self) -> str:
        return f"emq:{{{self.name}}}:"

    def script_keys(self, script: str, *own: str) -> list[str]:
        """The ``KEYS`` of a call of echomq's ``script``: the prefix, the call's ``own``
        keys, then the static keys the script touches (``SCRIPT_KEYS``)."""
        return [self.prefix, *own, *_static(self.name, script)]

    @property
    def fence(self) -> str:
        """Never written: every script declares it as its last key, so while the queue's
        slot is being migrated between masters (some keys moved, some not) each script is
        refused with TRYAGAIN on both nodes instead of running on half a queue. Without it
        a script that declares only the prefix (claim, reap, stats, …) finds no key on the
        old owner, is sent (ASK) to the new one and runs there on the keys moved so far:
        a claim stranded the lanes it popped, and keys it wrote made MIGRATE fail with
        BUSYKEY (tests/distributed/test_resharding.py). With it the queue pauses for the
        move; callers see the cluster client's error and retry."""
        return f"{self.prefix}~fence"

    def job(self, job_id: str) -> str:
        """Hash: the job row. Its fields, written only when they say something a default
        does not (a pending guess's row is ``lane``, ``body``, ``enq``, ``seq``):

        ``body`` the payload (``payload`` in a row written before that name, still read);
        ``lane``; ``max`` deliveries allowed (absent: ``checks.DEFAULT_MAX_ATTEMPTS``); ``enq`` enqueue time; ``seq``; ``headers``;
        ``load`` the load subject when it is not the lane; ``state`` (absent = pending);
        ``attempts`` (the fencing token), ``failures``, ``stalls`` (absent = 0); while
        active ``worker``, ``lease``, ``lid``; ``due`` while scheduled; ``error``,
        ``reason``, ``result``, ``done`` (time finished). Every row has ``enq``."""
        return f"{self.prefix}job:{job_id}"

    def lane(self, lane: str) -> str:
        """Sorted set, score 0, members ordered by id = mint order: a lane's pending jobs."""
        return f"{self.prefix}lane:{lane}"

    @property
    def new(self) -> str:
        """List: activated lanes (empty when a job arrived), served first, one job each.
        With ``ring`` it holds exactly the non-empty lanes, each in one of the two, once."""
        return f"{self.prefix}new"

    @property
    def ring(self) -> str:
        """List: lanes still non-empty after a claim, served round-robin, alternating
        with ``new`` while both hold lanes."""
        return f"{self.prefix}ring"

    @property
    def owed(self) -> str:
        """String ``"1"`` while the ring is owed the next lane claim (the last one served
        ``new``); absent otherwise."""
        return f"{self.prefix}owed"

    def open(self, subject: str) -> str:
        """Sorted set job_id -> enqueue time (server ms): a load subject's (by default a
        lane's) unfinished jobs but those its own lane holds: the active and scheduled jobs
        of its lane, and every unfinished job of another lane counted against it, pending
        too. With the lane's own waiting jobs it is what ``max_pending`` caps and
        ``Lanes.unfinished`` lists (lua/include/common.lua, ``open_key``); an empty one
        does not exist."""
        return f"{self.prefix}open:{subject}"

    @property
    def foreign(self) -> str:
        """Hash lane -> how many of the jobs waiting in that lane count against another load
        subject (a row with ``load``): what a lane's depth holds that is not its own
        subject's load (``Lanes.load``). Absent while no lane holds such a job."""
        return f"{self.prefix}foreign"

    @property
    def in_lanes(self) -> str:
        """String counter: jobs waiting in lanes, in all, so ``stats`` costs no lane scan."""
        return f"{self.prefix}inlanes"

    @property
    def pending(self) -> str:
        """Sorted set, score 0: the plain FIFO queue."""
        return f"{self.prefix}pending"

    @property
    def active(self) -> str:
        """Sorted set scored by lease deadline (server ms)."""
        return f"{self.prefix}active"

    @property
    def scheduled(self) -> str:
        """Sorted set scored by due time (server ms): delayed jobs and retries."""
        return f"{self.prefix}scheduled"

    @property
    def completed(self) -> str:
        """Sorted set scored by completion time; trimmed by count and age."""
        return f"{self.prefix}completed"

    @property
    def dead(self) -> str:
        """Sorted set scored by time of death."""
        return f"{self.prefix}dead"

    @property
    def counters(self) -> str:
        """Hash of transition counters (enqueued, claimed, completed, failed, reaped, …)."""
        return f"{self.prefix}counters"

    @property
    def refused(self) -> str:
        """Hash of stale calls refused, by operation. Kept apart from ``counters`` so that a
        stale call leaves every job, location and transition counter as it was."""
        return f"{self.prefix}refused"

    @property
    def events(self) -> str:
        """Stream of completed / failed / reaped / dead events, capped."""
        return f"{self.prefix}events"

    @property
    def replicated(self) -> str:
        """String counter written right after each enqueue that waits for replicas, on
        the same connection, so that WAIT covers the job even when the enqueue itself
        wrote nothing (a replay of a job another connection created)."""
        return f"{self.prefix}replicated"

    @property
    def wake(self) -> str:
        """List that idle consumers BLPOP; holds at most one token."""
        return f"{self.prefix}wake"

    @property
    def workers(self) -> str:
        """Sorted set worker_id -> heartbeat deadline (server ms)."""
        return f"{self.prefix}workers"

    def worker(self, worker_id: str) -> str:
        """Hash: a worker's self-description (pid, host, …) as of its last heartbeat."""
        return f"{self.prefix}worker:{worker_id}"

    def claim(self, claim_id: str) -> str:
        """The ids one claim call leased (a JSON list, kept ``min(lease, 60 s)``): what a
        re-run of that call (a retry after a lost reply) answers instead of leasing more."""
        return f"{self.prefix}claim:{claim_id}"

    def worker_jobs(self, worker_id: str) -> str:
        """Set: the jobs a worker holds, so a lapsed worker's jobs are found without a scan."""
        return f"{self.prefix}wjobs:{worker_id}"

    @property
    def reaper(self) -> str:
        """String: the id of the queue's one reaper, while it holds the lock (PX)."""
        return f"{self.prefix}reaper"

    @property
    def swept(self) -> str:
        """Hash {at, by}: the server time and the reaper of the queue's last sweep (an
        outage shows as a longer gap than a live queue leaves, reap.lua)."""
        return f"{self.prefix}swept"

    def seq(self, lane: str, scope: str) -> str:
        """String counter: next sequence number of ``lane`` within ``scope``."""
        return f"{self.prefix}seq:{lane}:{scope}"

    def dedup(self, key: str) -> str:
        """Hash {job, fp, seq}: a dedup key bound to the job it admitted (``Lanes.submit``)."""
        return f"{self.prefix}dedup:{key}"

    def rate(self, subject: str) -> str:
        """Hash {tokens, ts}: a rate subject's token bucket; expires once refilled."""
        return f"{self.prefix}rate:{subject}"
