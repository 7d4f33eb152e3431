"""Every Valkey key the game keeps, all under ``cmx:`` (EchoMQ's own are under ``emq:``).

A hash tag (``{rounds}``, ``{workers}``) puts the keys one script or one transaction
touches together in one Cluster slot; a key without one is only ever read or written alone.
"""

from __future__ import annotations

from codemojex.config import GUESS_QUEUE

# Rounds (codemojex.rounds): lua/open_round.lua swaps the current round for its successor
# and writes the successor's hash in one script, so both live in the {rounds} slot.
CURRENT_ROUND = "cmx:{rounds}:current"  # string: the open round's id


def round_key(round_id: str) -> str:
    """Hash: one round as opened, its close job and predecessor (``RoundInfo.from_hash``)."""
    return f"cmx:{{rounds}}:round:{round_id}"


# The rounds queue's schedule (EchoMQ's, under ``emq:{rounds}:``) whose ticks are the
# periodic sweep: a current round exists, dead jobs reach the durable floor.
SWEEP_SCHEDULE = "sweep"


# String: the guesses queue's partition count, recorded by the first process (codemojex.layout).
LAYOUT = "cmx:layout:partitions"

# String: the latest death time the durable floor has archived (codemojex.admin).
FLOOR_CURSOR = "cmx:floor:reached_ms"


def floor_cursor(queue_name: str) -> str:
    """The floor's cursor of one partition; the unpartitioned queue's is :data:`FLOOR_CURSOR`."""
    return FLOOR_CURSOR if queue_name == GUESS_QUEUE else f"{FLOOR_CURSOR}:{queue_name}"


def bucket_key(bucket: str, subject: str) -> str:
    """Hash: one subject's tokens in a named bucket (``TokenBuckets``, lua/take_token.lua)."""
    return f"cmx:bucket:{bucket}:{subject}"


# Workers and supervisors (codemojex.control): orders and what the admin page lists.
WORKERS = "cmx:{workers}:"
SUPERVISORS = WORKERS + "supervisors"  # hash supervisor_id -> JSON {pid, host, beat_ms}
EXITS = WORKERS + "exits"  # hash worker_id -> JSON {reason, at_ms, pid}
KILLED = WORKERS + "killed"  # hash worker_id -> JSON [job ids it was scoring when killed]
KNOWN = WORKERS + "known"  # sorted set worker_id -> first seen (ms): dead ones stay listed


def kill_key(worker_id: str) -> str:
    """List: kill orders for one worker process, which BLPOPs it."""
    return f"{WORKERS}kill:{worker_id}"


def spawn_key(supervisor_id: str) -> str:
    """List: worker ids one supervisor is ordered to start."""
    return f"{WORKERS}spawn:{supervisor_id}"
