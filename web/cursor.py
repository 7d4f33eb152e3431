"""A socket's resume point: the ``event_id`` of a ``score`` message, sent back as ``after=``.

With one partition it is the event's stream id (``"ms-seq"``), as it always was. A
partitioned guesses queue has one events stream per partition, each with its own ids (on
a cluster, minted on different masters' clocks), so one id cannot say where a socket is
in all of them. There the cursor is ``"<own>_<p0>_<p1>_…"``: the event's own id first (so
a reader that takes the leading ``ms`` as the event's time still can), then the position
in every partition's stream up to which this socket was offered every event, in partition
order. Resuming replays each stream after its own position: nothing is skipped, because
a position only advances once its events were offered, in order, before the message that
carries it.

The contract calls ``event_id`` opaque; a cursor of another layout reads as unusable and
the socket gets a ``gap`` (the page refetches), never a wrong replay.
"""

from __future__ import annotations

from collections.abc import Sequence

Position = tuple[int, int]

_MAX_ID_PART = 2**64 - 1
_SEPARATOR = "_"


def parse_event_id(value: str) -> Position | None:
    """``"ms-seq"`` (or ``"ms"``) as a comparable pair; None when it is not a stream id."""
    ms, _, seq = value.partition("-")
    if not ms.isdigit() or len(ms) > 20 or (seq and (not seq.isdigit() or len(seq) > 20)):
        return None
    pos = int(ms), int(seq or 0)
    # Valkey's ids are two unsigned 64-bit numbers; a bigger one is no id it could answer.
    return pos if max(pos) <= _MAX_ID_PART else None


def encode(own: str, positions: Sequence[str]) -> str:
    """The cursor of a message about event ``own``, with every partition's position."""
    return own if len(positions) == 1 else _SEPARATOR.join((own, *positions))


def decode(value: str, partitions: int) -> list[Position] | None:
    """Every partition's position in ``value``; None when it is no cursor of this layout."""
    if partitions == 1:
        pos = parse_event_id(value)
        return None if pos is None else [pos]
    parts = value.split(_SEPARATOR)
    if len(parts) != partitions + 1:
        return None
    parsed = [parse_event_id(p) for p in parts]
    if any(p is None for p in parsed):
        return None
    return [p for p in parsed[1:] if p is not None]


def stream_id(pos: Position) -> str:
    return f"{pos[0]}-{pos[1]}"
