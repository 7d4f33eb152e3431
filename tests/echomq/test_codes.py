"""The refusal table (``echomq.codes``) against the scripts it speaks for: every code it
maps is one the script's header says it answers, and each raises what the table says, with
the call's own arguments and what the script found."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import echomq
from echomq.codes import REFUSALS, refuse
from echomq.scripts import SCRIPTS

LUA = Path(echomq.__file__).with_name("lua")


def _header(script: str) -> str:
    source = (LUA / f"{script}.lua").read_text()
    return source[: source.index("]]")]


@pytest.mark.parametrize("script", sorted(REFUSALS))
def test_every_mapped_code_is_one_its_script_answers(script: str) -> None:
    assert script in SCRIPTS
    returns = _header(script).split("Returns", 1)[1]
    for code in REFUSALS[script]:
        assert re.search(rf"(?<![\d-]){code}(?!\d)", returns), (script, code)


def test_lane_enqueue_refusals_carry_the_callers_arguments_and_the_scripts_finding() -> None:
    at = {"load_subject": "L", "deadline_ms": 5, "dedup_key": "k", "rate_subject": "s"}
    with pytest.raises(echomq.LaneFull) as full:
        refuse("lane_enqueue", -1, at, b"7")
    assert (full.value.lane, full.value.limit) == ("L", 7)
    with pytest.raises(echomq.DeadlinePassed) as late:
        refuse("lane_enqueue", -2, at, 9)
    assert (late.value.deadline_ms, late.value.server_now_ms) == (5, 9)
    with pytest.raises(echomq.DedupConflict) as bound:
        refuse("lane_enqueue", -3, at, b"J1")
    assert (bound.value.key, bound.value.job_id) == ("k", "J1")
    with pytest.raises(echomq.RateLimited) as limited:
        refuse("lane_enqueue", -4, at, "250")
    assert (limited.value.subject, limited.value.retry_after_ms) == ("s", 250)


@pytest.mark.parametrize("script", ["retry_dead", "discard"])
def test_an_operator_call_on_a_job_that_is_not_dead_is_refused(script: str) -> None:
    with pytest.raises(echomq.JobNotFound, match="J1"):
        refuse(script, -1, {"job_id": "J1"})
    with pytest.raises(echomq.InvalidState, match="J1 is not dead"):
        refuse(script, -2, {"job_id": "J1"})


@pytest.mark.parametrize("code", [1, 0])
def test_an_answer_is_no_refusal(code: int) -> None:
    for script in REFUSALS:
        refuse(script, code, {})
