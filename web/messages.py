"""What the hub sends a socket, and how a resume point is read: the ``score`` message of a
guess's event, a round's progress topic, the keep-alive ping, an events stream id."""

from __future__ import annotations

import functools
from typing import Any, Literal, TypedDict, cast

import echomq
from codemojex.results import read_score
from web.outbox import Outgoing

_MAX_ID_PART = 2**64 - 1


def parse_event_id(value: str) -> tuple[int, int] | None:
    """``"ms-seq"`` (or ``"ms"``) as a comparable pair; None when it is not a stream id."""
    ms, _, seq = value.partition("-")
    if not ms.isdigit() or len(ms) > 20 or (seq and (not seq.isdigit() or len(seq) > 20)):
        return None
    pos = int(ms), int(seq or 0)
    # Valkey's ids are two unsigned 64-bit numbers; a bigger one is no id it could answer.
    return pos if max(pos) <= _MAX_ID_PART else None


class ScoreMessage(TypedDict):
    """The ``score`` message a player's socket gets (docs/contract.md §4)."""

    type: Literal["score"]
    event_id: str
    job_id: str
    round_id: Any
    player_id: str
    seq: Any
    guess: Any
    exact: Any
    near: Any
    solved: Any
    points: Any


def score_message(event: echomq.Event) -> ScoreMessage | None:
    """The ``score`` message of a guesses-queue event, or None if it is not a score."""
    if event.type != "completed":
        return None
    try:
        r = event.result
    except ValueError:
        return None
    shown = read_score(r)
    if shown is None:
        return None
    return cast(
        ScoreMessage, {"type": "score", "event_id": event.event_id, "job_id": event.job_id} | shown
    )


PING = Outgoing.of({"type": "ping"})


@functools.lru_cache(maxsize=4096)
def progress_topic(round_id: str) -> str:
    """The topic of a round's progress messages: a newer one supersedes the older."""
    return f"progress:{round_id}"
