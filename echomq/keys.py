"""Every key name of a queue, built in exactly one place (docs/api/scripts.md lists them)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

# The static keys each script reads from KEYS right after its own, in this order.
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "claim": (
        "new", "pending", "active", "scheduled", "dead", "counters", "events", "wake",
        "workers", "in_lanes", "foreign", "paused",
    ),
    "cancel": (
        "new", "ring", "pending", "active", "scheduled", "cancelled", "counters", "events",
        "in_lanes", "foreign",
    ),
    "complete": ("active", "completed", "counters", "refused", "events"),
    "discard": ("dead", "counters"),
    "enqueue": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "enqueue_many": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "extend": ("active", "refused"),
    "fail": ("active", "scheduled", "dead", "counters", "refused", "events", "wake"),
    "heartbeat": ("active", "counters", "events", "workers", "swept"),
    "lane_claim": (
        "new", "ring", "owed", "pending", "active", "scheduled", "dead", "counters", "events",
        "wake", "workers", "in_lanes", "foreign", "paused",
    ),
    "lane_enqueue": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "pause": ("paused", "counters"),
    "progress": ("refused", "events"),
    "promote": ("new", "pending", "scheduled", "counters", "wake", "in_lanes", "foreign"),
    "reap": (
        "new", "pending", "active", "scheduled", "dead", "counters", "events", "wake",
        "workers", "in_lanes", "swept", "reaper", "foreign",
    ),
    "release": ("new", "pending", "active", "counters", "refused", "wake", "in_lanes", "foreign"),
    "resume": ("paused", "counters", "wake"),
    "retry_dead": ("new", "pending", "dead", "counters", "wake", "in_lanes", "foreign"),
    "schedule_add": ("schedules", "sched_wake"),
    "schedule_due": ("schedules",),
    "schedule_pause": ("schedules",),
    "schedule_remove": ("schedules",),
    "schedule_resume": ("schedules", "sched_wake"),
    "schedule_tick": ("new", "pending", "counters", "wake", "in_lanes", "foreign", "schedules"),
    "stats": (
        "new", "ring", "pending", "active", "scheduled", "completed", "dead", "counters",
        "refused", "in_lanes", "paused",
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
        # Declared by every script, never written: mid-migration each script is refused
        # (TRYAGAIN) instead of running on half a queue (docs/api/scripts.md).
        return f"{self.prefix}~fence"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def lane(self, lane: str) -> str:
        return f"{self.prefix}lane:{lane}"

    @property
    def new(self) -> str:
        return f"{self.prefix}new"

    @property
    def ring(self) -> str:
        return f"{self.prefix}ring"

    @property
    def owed(self) -> str:
        return f"{self.prefix}owed"

    def open(self, subject: str) -> str:
        return f"{self.prefix}open:{subject}"

    @property
    def foreign(self) -> str:
        return f"{self.prefix}foreign"

    @property
    def in_lanes(self) -> str:
        return f"{self.prefix}inlanes"

    @property
    def pending(self) -> str:
        return f"{self.prefix}pending"

    @property
    def active(self) -> str:
        return f"{self.prefix}active"

    @property
    def scheduled(self) -> str:
        return f"{self.prefix}scheduled"

    @property
    def completed(self) -> str:
        return f"{self.prefix}completed"

    @property
    def dead(self) -> str:
        return f"{self.prefix}dead"

    @property
    def cancelled(self) -> str:
        return f"{self.prefix}cancelled"

    @property
    def counters(self) -> str:
        return f"{self.prefix}counters"

    @property
    def refused(self) -> str:
        return f"{self.prefix}refused"

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    @property
    def replicated(self) -> str:
        return f"{self.prefix}replicated"

    @property
    def paused(self) -> str:
        # Present while the queue is paused: claims hand out nothing.
        return f"{self.prefix}paused"

    def schedule(self, name: str) -> str:
        return f"{self.prefix}schedule:{name}"

    @property
    def schedules(self) -> str:
        # Every schedule's name, scored by its next due time (+inf while paused).
        return f"{self.prefix}schedules"

    @property
    def sched_wake(self) -> str:
        # The schedulers' wake list: a new or resumed schedule may be due sooner.
        return f"{self.prefix}schedwake"

    @property
    def wake(self) -> str:
        return f"{self.prefix}wake"

    @property
    def workers(self) -> str:
        return f"{self.prefix}workers"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}worker:{worker_id}"

    def claim(self, claim_id: str) -> str:
        return f"{self.prefix}claim:{claim_id}"

    def worker_jobs(self, worker_id: str) -> str:
        return f"{self.prefix}wjobs:{worker_id}"

    @property
    def reaper(self) -> str:
        return f"{self.prefix}reaper"

    @property
    def swept(self) -> str:
        return f"{self.prefix}swept"

    def seq(self, lane: str, scope: str) -> str:
        return f"{self.prefix}seq:{lane}:{scope}"

    def dedup(self, key: str) -> str:
        return f"{self.prefix}dedup:{key}"

    def rate(self, subject: str) -> str:
        return f"{self.prefix}rate:{subject}"
