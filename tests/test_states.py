"""The status transition table: all 36 (from, to) pairs, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from pytest_selfheal.errors import EXIT_REFUSED, RefusedError
from pytest_selfheal.records import vocab as states

# Written out independently of states.TRANSITIONS: this is the documented table (docs/store.md).
ALLOWED = {
    ("new", "planned"),
    ("new", "escalated"),
    ("planned", "running"),
    ("planned", "escalated"),
    ("running", "resolved"),
    ("running", "escalated"),
    ("running", "plan_proposed"),
    ("plan_proposed", "planned"),
    ("plan_proposed", "escalated"),
}
PAIRS = list(itertools.product(states.STATUSES, repeat=2))


def test_statuses() -> None:
    assert states.STATUSES == ("new", "planned", "running", "resolved", "escalated", "plan_proposed")
    assert len(PAIRS) == 36
    assert set(states.TRANSITIONS) == set(states.STATUSES)


@pytest.mark.parametrize("current,new", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair(current: str, new: str) -> None:
    expected = (current, new) in ALLOWED
    assert states.can_transition(current, new) is expected
    if expected:
        states.check_transition("incident_20260101_000000_a", current, new)
        return
    with pytest.raises(RefusedError) as info:
        states.check_transition("incident_20260101_000000_a", current, new)
    allowed = ", ".join(b for b in states.STATUSES if (current, b) in ALLOWED) or "none, it is final"
    assert str(info.value) == (
        f"cannot move incident incident_20260101_000000_a from {current} to {new} (allowed from {current}: {allowed})"
    )
    assert info.value.exit_code == EXIT_REFUSED


def test_terminal_statuses_are_final_and_are_the_buckets() -> None:
    assert states.TERMINAL == states.ARCHIVE_BUCKETS == ("resolved", "escalated")
    for status in states.STATUSES:
        assert (states.allowed_targets(status) == ()) is (status in states.TERMINAL)


def test_resolved_only_from_running() -> None:
    assert [s for s in states.STATUSES if states.can_transition(s, "resolved")] == ["running"]


def test_unknown_status_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        states.can_transition("new", "done")
    with pytest.raises(ValueError):
        states.allowed_targets("done")
