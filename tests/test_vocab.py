"""The string-valued vocabularies: a member is its string in JSON, text and comparisons."""

from __future__ import annotations

import json

import pytest

from pytest_selfheal.loop import policy
from pytest_selfheal.loop.messages import stop_message
from pytest_selfheal.records import vocab as states
from pytest_selfheal.records.stops import STOPS, stop_facts, stop_tone
from pytest_selfheal.records.vocab import (
    FailureClass,
    FinalStatus,
    IncidentStatus,
    Line,
    StopReason,
    TextEnum,
    Tone,
    TriageLabel,
    final_tone,
    tone_of,
)

ALL = [m for enum in (FinalStatus, IncidentStatus, StopReason, TriageLabel, FailureClass) for m in enum]


@pytest.mark.parametrize("member", ALL, ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_a_member_is_its_value_in_json_text_and_comparisons(member: TextEnum) -> None:
    value = member.value
    assert json.dumps({member: member}) == json.dumps({value: value})
    assert json.dumps([member], indent=1) == json.dumps([value], indent=1)
    assert (str(member), f"{member}", format(member, ">3"), f"{member:s}") == (value, value, format(value, ">3"), value)
    assert member == value and hash(member) == hash(value)


def test_final_status_is_defined_once() -> None:
    assert IncidentStatus.RESOLVED == FinalStatus.RESOLVED and IncidentStatus.RESOLVED in states.TERMINAL
    assert policy.final_status_of(StopReason.SUCCESS) is FinalStatus.RESOLVED


def test_a_line_carries_the_tone_of_its_record() -> None:
    assert tone_of("plain text -> STOP success") is Tone.PLAIN  # the text is never searched
    assert tone_of(Line("x", Tone.GOOD)) is Tone.GOOD and Line("x", Tone.GOOD) == "x"
    assert [stop_tone(r) for r in (None, StopReason.SUCCESS, StopReason.MAX_ITERATIONS)] == [Tone.WARN, Tone.GOOD, Tone.BAD]
    assert [final_tone(s) for s in (FinalStatus.RESOLVED, FinalStatus.ESCALATED, None, "replan_requested")] == [
        Tone.GOOD, Tone.BAD, Tone.PLAIN, Tone.PLAIN]


def test_every_stop_reason_has_one_row_of_facts() -> None:
    assert set(STOPS) == set(StopReason)
    for reason, facts in STOPS.items():
        seen = [policy.Observation(0, {"t::a": "failed"}, ("f1",), ("TEST_ASSERTION",), "d0"),
                policy.Observation(1, {"t::a": "failed"}, ("f1",), ("TEST_ASSERTION",), "d1")]
        assert stop_message(reason, policy.LoopPolicy(), seen, 1, 2, 2, 2, 2, 1.0), reason  # every name is computed
        assert facts.options and facts.next_action.format(id="ID")
    with pytest.raises(ValueError, match="unknown stop reason 'nope'"):
        stop_facts("nope")
