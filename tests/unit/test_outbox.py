"""A socket's greeting and the progress the flusher offers meanwhile (web.outbox).

The flusher may offer a round's progress while a socket is still being greeted (its reads
of the round and the leaderboard are slow under load); the greeting then writes its own
snapshot. The socket must get each progress state once, and never an older one after a
newer (docs/contract.md §4: "only when something in it changed"). The sink records what reached
the wire; the frames are the ones the hub builds.
"""

from __future__ import annotations

import orjson

from web.messages import progress_topic
from web.outbox import Connection, Outgoing


class Wire:
    """A FrameSink that keeps every frame written, as the transport would send it."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write_frame(self, frame: bytes) -> bool:
        self.frames.append(frame)
        return True

    def buffered(self) -> int:
        return 0

    def close_now(self, code: int) -> None:
        raise AssertionError(f"closed {code}")


def progress(guesses: int, round_id: str = "RND_1") -> Outgoing:
    message = {"type": "progress", "round_id": round_id, "guesses": guesses}
    return Outgoing.of(message, topic=progress_topic(round_id))


def guesses_seen(wire: Wire) -> list[int]:
    # a frame is a header of 2 bytes (short text) then the JSON
    return [orjson.loads(f[2:])["guesses"] for f in wire.frames if b'"progress"' in f]


def test_a_progress_offered_during_the_greeting_is_not_written_twice() -> None:
    wire = Wire()
    conn = Connection("PLR_1", wire)
    mark = conn.waiting_mark()
    conn.offer(progress(5))  # the flusher, while the greeting reads the round
    conn.send_snapshot(progress(5), mark)  # the snapshot: what the others were sent
    conn.greeted()
    assert guesses_seen(wire) == [5]


def test_an_older_progress_waiting_is_dropped_and_a_newer_one_kept() -> None:
    wire = Wire()
    conn = Connection("PLR_1", wire)
    conn.offer(progress(3))  # queued before the snapshot was taken: older than it
    mark = conn.waiting_mark()
    conn.offer(progress(9))  # queued while the snapshot was built: newer
    conn.send_snapshot(progress(7), mark)
    conn.greeted()
    conn.offer(progress(10))
    assert guesses_seen(wire) == [7, 9, 10]


def test_other_topics_and_messages_wait_untouched() -> None:
    wire = Wire()
    conn = Connection("PLR_1", wire)
    mark = conn.waiting_mark()
    conn.offer(progress(4, "RND_2"))
    conn.offer(Outgoing.of({"type": "score", "guesses": 0}, job_id="JOB_1"))
    conn.send_snapshot(progress(4), mark)
    conn.greeted()
    assert [orjson.loads(f[2:])["type"] for f in wire.frames] == ["progress", "progress", "score"]
