"""What the scripts' refusal codes mean: one table, script -> code -> the error raised."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .codec import text
from .errors import (
    DeadlinePassed,
    DedupConflict,
    EchoMQError,
    InvalidState,
    JobNotFound,
    LaneFull,
    RateLimited,
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """One code's meaning: the error type and the arguments it is built with."""

    error: type[EchoMQError]
    args: Callable[[Mapping[str, Any], Any], tuple[Any, ...]]

    def build(self, at: Mapping[str, Any], value: Any) -> EchoMQError:
        return self.error(*self.args(at, value))


# retry_dead and discard are operator calls on a dead job: the same two refusals.
_ON_DEAD: Final[Mapping[int, Refusal]] = {
    -1: Refusal(JobNotFound, lambda at, _: (at["job_id"],)),
    -2: Refusal(InvalidState, lambda at, _: (f"{at['job_id']} is not dead",)),
}

REFUSALS: Final[Mapping[str, Mapping[int, Refusal]]] = {
    "lane_enqueue": {
        -1: Refusal(LaneFull, lambda at, v: (at["load_subject"], int(v))),
        -2: Refusal(DeadlinePassed, lambda at, v: (at["deadline_ms"], int(v))),
        -3: Refusal(DedupConflict, lambda at, v: (at["dedup_key"], text(v))),
        -4: Refusal(RateLimited, lambda at, v: (at["rate_subject"], int(v))),
    },
    "retry_dead": _ON_DEAD,
    "discard": _ON_DEAD,
}


def refuse(script: str, code: int, at: Mapping[str, Any], value: Any = None) -> None:
    """Raise the error ``script``'s ``code`` means; return when the code is no refusal."""
    refusal = REFUSALS[script].get(code)
    if refusal is not None:
        raise refusal.build(at, value)
