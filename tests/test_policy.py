"""The RALF-Lite loop decision (policy.py): every stop reason, the precedence, the counters."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import attempt_record, incident_record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_check import assert_valid

from pytest_selfheal.config.settings import ConfigLayer, merge_layers
from pytest_selfheal.errors import ConfigError, InputError
from pytest_selfheal.loop.decision import decide, known_flaky
from pytest_selfheal.loop.messages import command_shown, decision_point, handoff, recommended_next_action, status_line
from pytest_selfheal.loop.policy import (
    PRECEDENCE,
    LoopPolicy,
    Observation,
    capture_observation,
    fixed_tests,
    flaky_tests,
    loop_selection,
    no_progress_streak,
    observation_from_attempt,
    progress_between,
    same_error_repeats,
)
from pytest_selfheal.records.models import TEST_ASSERTION, TIMEOUT, TOOLING_ENV
from pytest_selfheal.records.stops import progress_words
from pytest_selfheal.records.vocab import FAILURE_TYPES, StopReason

ROOT = Path(__file__).resolve().parent.parent
A = "tests/test_a.py::test_a"
B = "tests/test_a.py::test_b"


def fail(
    i: int,
    fps: Sequence[str] = ("F",),
    *,
    diff: Optional[str] = "d0",
    types: Optional[Sequence[str]] = None,
    outcomes: Optional[dict[str, str]] = None,
    **kw: Any,
) -> Observation:
    """An observation where test A fails with the given fingerprints."""
    return Observation(
        iteration=i,
        outcomes=outcomes if outcomes is not None else {A: "failed"},
        fingerprints=tuple(fps),
        failure_types=tuple(types) if types is not None else tuple(TEST_ASSERTION for _ in fps),
        diff_hash=diff,
        **kw,
    )


def green(i: int, *, diff: Optional[str] = "d0", outcomes: Optional[dict[str, str]] = None, **kw: Any) -> Observation:
    """An observation where every selected test passes."""
    return Observation(i, outcomes if outcomes is not None else {A: "passed"}, (), (), diff, **kw)


def nofix(i: int, fps: Sequence[str] = ("F",), **kw: Any) -> Observation:
    return fail(i, fps, repair_result="no_fix_found", **kw)


def timed_out(i: int, fps: Sequence[str] = ("F",), **kw: Any) -> Observation:
    return fail(i, fps, timed_out=True, **kw)


DEFAULT = LoopPolicy()


# --------------------------------------------------------------------------- one case per stop reason

STOP_CASES: list[tuple[str, LoopPolicy, list[Observation], dict[str, Any], str, Optional[str], int]] = [
    # (name, policy, observations, decide kwargs, stop reason, final status, iteration)
    ("disabled", LoopPolicy(enabled=False), [fail(0)], {}, "disabled", None, 0),
    ("success_flaky", DEFAULT, [fail(0), green(1)], {}, "success", "resolved", 1),
    ("tests_edited", DEFAULT, [fail(0), green(1, diff="d1", repair_result="diff", tests_edited=("tests/test_calc.py",))], {},
     "tests_edited", "escalated", 1),
    # A pass with tests edited and the seal broken: the judge changed, that comes first.
    ("harness_changed", DEFAULT, [fail(0), green(1, diff="d1", tests_edited=("tests/test_calc.py",), harness_changed=("tests/__init__.py",))],
     {}, "harness_changed", "escalated", 1),
    ("unverified_failures", DEFAULT, [fail(0), green(1)], {"unverified": 1}, "unverified_failures", "escalated", 1),
    ("cancelled", DEFAULT, [fail(0)], {"cancelled": True}, "cancelled", None, 0),
    ("tooling_env_at_capture", DEFAULT, [fail(0, types=[TOOLING_ENV])], {}, "tooling_env", "escalated", 0),
    (
        "scope_expansion_denied",
        DEFAULT,
        [fail(0), fail(1, ["G"], diff="d1", repair_result="diff", scope_denied=True)],
        {},
        "scope_expansion_denied",
        "escalated",
        1,
    ),
    (
        "provider_escaped_even_when_green",
        DEFAULT,
        [fail(0), green(1, repair_result="crashed", provider_escaped=True)],
        {},
        "provider_escaped",
        "escalated",
        1,
    ),
    ("timeout_twice", DEFAULT, [fail(0), timed_out(1), timed_out(2)], {}, "timeout", "escalated", 2),
    (
        "replan_requested",
        LoopPolicy(auto_replan_on_no_progress=True),
        [fail(0), fail(1)],
        {},
        "replan_requested",
        "replan_requested",
        1,
    ),
    ("repeated_fingerprint", DEFAULT, [fail(0), fail(1)], {}, "repeated_fingerprint", "escalated", 1),
    # The selected test vanished (no fingerprint, no pass, no code change): no progress, no repeat.
    ("no_progress", DEFAULT, [fail(0), fail(1, [], outcomes={A: "missing"})], {}, "no_progress", "escalated", 1),
    ("no_fix_found", DEFAULT, [fail(0), nofix(1), nofix(2)], {}, "no_fix_found", "escalated", 2),
    # The selection passes but the change broke B: at the end of the budget, not a success.
    ("regression", LoopPolicy(max_iterations=1),
     [fail(0), fail(1, ["R"], diff="d1", outcomes={A: "passed", "B": "failed"}, regressions=("B",))], {},
     "regression", "escalated", 1),
    (
        "runtime_budget",
        LoopPolicy(max_runtime_minutes=5),
        [fail(0), fail(1, ["G"], diff="d1")],
        {"elapsed_minutes": 5.0},
        "runtime_budget",
        "escalated",
        1,
    ),
    (
        "max_iterations",
        DEFAULT,
        [fail(0, ["F0"]), fail(1, ["F1"], diff="d1"), fail(2, ["F2"], diff="d2"), fail(3, ["F3"], diff="d3")],
        {},
        "max_iterations",
        "escalated",
        3,
    ),
]


def test_stop_cases_cover_every_reason() -> None:
    assert {case[4] for case in STOP_CASES} == set(tuple(StopReason))


@pytest.mark.parametrize(
    "policy,observations,kwargs,reason,final_status,iteration",
    [case[1:] for case in STOP_CASES],
    ids=[case[0] for case in STOP_CASES],
)
def test_each_stop_reason(
    policy: LoopPolicy,
    observations: list[Observation],
    kwargs: dict[str, Any],
    reason: str,
    final_status: Optional[str],
    iteration: int,
) -> None:
    decision = decide(policy, observations, **kwargs)
    assert decision.action == "stop"
    assert decision.stop_reason == reason
    assert decision.conditions[0] == reason
    assert decision.final_status == final_status
    assert decision.iteration == iteration
    assert decision.retry_timeout is False
    assert decision.message and "\n" not in decision.message


def test_stop_cases_did_not_stop_earlier() -> None:
    for name, policy, observations, kwargs, _reason, _status, _it in STOP_CASES:
        if kwargs or name in ("disabled", "tooling_env_at_capture"):
            continue
        for end in range(1, len(observations)):
            assert decide(policy, observations[:end]).action == "continue", (name, end)


def test_precedence_is_a_permutation_of_stop_reasons() -> None:
    assert sorted(PRECEDENCE) == sorted(tuple(StopReason))
    assert len(set(PRECEDENCE)) == len(PRECEDENCE)
    assert PRECEDENCE[:5] == ("disabled", "harness_changed", "tests_edited", "unverified_failures", "success")
    assert PRECEDENCE.index("replan_requested") < PRECEDENCE.index("repeated_fingerprint")


def test_docs_state_the_same_precedence() -> None:
    text = (ROOT / "docs" / "loop.md").read_text(encoding="utf-8")
    match = re.search(r"^PRECEDENCE: (.+)$", text, re.MULTILINE)
    assert match, "docs/loop.md must state the precedence on a 'PRECEDENCE:' line"
    assert tuple(x.strip() for x in match.group(1).split(">")) == PRECEDENCE
    for reason in tuple(StopReason):
        assert f"`{reason}`" in text


# --------------------------------------------------------------------------- precedence pairs

PAIRS: list[tuple[str, str, LoopPolicy, list[Observation], dict[str, Any]]] = [
    ("disabled", "success", LoopPolicy(enabled=False), [fail(0), green(1)], {}),
    ("disabled", "cancelled", LoopPolicy(enabled=False), [fail(0)], {"cancelled": True}),
    ("disabled", "tooling_env", LoopPolicy(enabled=False), [fail(0, types=[TOOLING_ENV])], {}),
    ("success", "cancelled", DEFAULT, [fail(0), green(1)], {"cancelled": True}),
    ("success", "scope_expansion_denied", DEFAULT, [fail(0), green(1, scope_denied=True)], {}),
    ("success", "no_fix_found", DEFAULT, [fail(0), nofix(1), green(2, repair_result="no_fix_found")], {}),
    ("success", "runtime_budget", LoopPolicy(max_runtime_minutes=1), [fail(0), green(1)], {"elapsed_minutes": 2}),
    ("success", "max_iterations", LoopPolicy(max_iterations=1), [fail(0), green(1)], {}),
    ("cancelled", "tooling_env", DEFAULT, [fail(0, types=[TOOLING_ENV])], {"cancelled": True}),
    ("cancelled", "repeated_fingerprint", DEFAULT, [fail(0), fail(1)], {"cancelled": True}),
    ("cancelled", "max_iterations", LoopPolicy(max_iterations=0), [fail(0)], {"cancelled": True}),
    (
        "tooling_env",
        "scope_expansion_denied",
        DEFAULT,
        [fail(0), fail(1, types=[TOOLING_ENV], scope_denied=True)],
        {},
    ),
    (
        "tooling_env",
        "timeout",
        DEFAULT,
        [fail(0, types=[TIMEOUT]), fail(1, ["F", "G"], types=[TIMEOUT, TOOLING_ENV], timed_out=True)],
        {},
    ),
    ("tooling_env", "repeated_fingerprint", DEFAULT, [fail(0), fail(1, types=[TOOLING_ENV])], {}),
    ("tooling_env", "max_iterations", LoopPolicy(max_iterations=1), [fail(0), fail(1, ["G"], types=[TOOLING_ENV])], {}),
    (
        "scope_expansion_denied",
        "timeout",
        DEFAULT,
        [fail(0), timed_out(1), timed_out(2, scope_denied=True)],
        {},
    ),
    ("scope_expansion_denied", "repeated_fingerprint", DEFAULT, [fail(0), fail(1, scope_denied=True)], {}),
    (
        "scope_expansion_denied",
        "max_iterations",
        LoopPolicy(max_iterations=1),
        [fail(0), fail(1, ["G"], scope_denied=True)],
        {},
    ),
    ("timeout", "repeated_fingerprint", DEFAULT, [fail(0), fail(1), timed_out(2), timed_out(3)], {}),
    ("timeout", "max_iterations", LoopPolicy(max_iterations=2), [fail(0), timed_out(1), timed_out(2)], {}),
    (
        "timeout",
        "runtime_budget",
        LoopPolicy(max_runtime_minutes=1),
        [fail(0), timed_out(1), timed_out(2)],
        {"elapsed_minutes": 3},
    ),
    ("replan_requested", "repeated_fingerprint", LoopPolicy(auto_replan_on_no_progress=True), [fail(0), fail(1)], {}),
    (
        "replan_requested",
        "max_iterations",
        LoopPolicy(auto_replan_on_no_progress=True, max_iterations=1),
        [fail(0), fail(1)],
        {},
    ),
    (
        "replan_requested",
        "runtime_budget",
        LoopPolicy(auto_replan_on_no_progress=True, max_runtime_minutes=1),
        [fail(0), fail(1)],
        {"elapsed_minutes": 1},
    ),
    ("repeated_fingerprint", "no_progress", DEFAULT, [fail(0), fail(1)], {}),
    ("repeated_fingerprint", "no_fix_found", LoopPolicy(max_iterations=9), [fail(0), fail(1), nofix(2), nofix(3)], {}),
    ("repeated_fingerprint", "max_iterations", LoopPolicy(max_iterations=1), [fail(0), fail(1)], {}),
    ("repeated_fingerprint", "runtime_budget", LoopPolicy(max_runtime_minutes=0), [fail(0), fail(1)], {}),
    (
        "no_progress",
        "no_fix_found",
        LoopPolicy(error_fingerprint_repeats=9, max_iterations=9),
        [fail(0), fail(1), nofix(2), nofix(3)],
        {},
    ),
    (
        "no_progress",
        "max_iterations",
        LoopPolicy(error_fingerprint_repeats=9, max_iterations=1),
        [fail(0), fail(1)],
        {},
    ),
    (
        "no_progress",
        "runtime_budget",
        LoopPolicy(error_fingerprint_repeats=9, max_runtime_minutes=1),
        [fail(0), fail(1)],
        {"elapsed_minutes": 9},
    ),
    (
        "no_fix_found",
        "runtime_budget",
        LoopPolicy(max_runtime_minutes=1),
        [fail(0), nofix(1), nofix(2)],
        {"elapsed_minutes": 1},
    ),
    ("no_fix_found", "max_iterations", LoopPolicy(max_iterations=2), [fail(0), nofix(1), nofix(2)], {}),
    (
        "runtime_budget",
        "max_iterations",
        LoopPolicy(max_iterations=1, max_runtime_minutes=1),
        [fail(0), fail(1, ["G"], diff="d1")],
        {"elapsed_minutes": 1},
    ),
]


@pytest.mark.parametrize(
    "winner,loser,policy,observations,kwargs",
    PAIRS,
    ids=[f"{winner}>{loser}" for winner, loser, *_ in PAIRS],
)
def test_precedence_pairs(
    winner: str, loser: str, policy: LoopPolicy, observations: list[Observation], kwargs: dict[str, Any]
) -> None:
    assert PRECEDENCE.index(winner) < PRECEDENCE.index(loser)
    decision = decide(policy, observations, **kwargs)
    # Both conditions really hold in this iteration; the earlier one wins.
    assert {winner, loser} <= set(decision.conditions), decision.conditions
    assert decision.stop_reason == winner


def test_replan_and_no_progress_are_exclusive() -> None:
    on = decide(LoopPolicy(auto_replan_on_no_progress=True, error_fingerprint_repeats=9), [fail(0), fail(1)])
    off = decide(LoopPolicy(auto_replan_on_no_progress=False, error_fingerprint_repeats=9), [fail(0), fail(1)])
    assert on.stop_reason == "replan_requested" and "no_progress" not in on.conditions
    assert off.stop_reason == "no_progress" and "replan_requested" not in off.conditions


# --------------------------------------------------------------------------- named scenarios


def test_flaky_passes_on_rerun_is_success_and_flagged() -> None:
    observations = [fail(0, outcomes={A: "failed", B: "passed"}), green(1, outcomes={A: "passed", B: "passed"})]
    decision = decide(DEFAULT, observations)
    assert (decision.stop_reason, decision.final_status) == ("success", "resolved")
    assert flaky_tests(observations) == [A]
    assert "flaky" in decision.message and A in decision.message
    # No code changed: a pass is flakiness, never a fix or progress.
    assert decision.tests_fixed == () and decision.progress_reasons == ("flaky",)
    assert not decision.progress
    assert status_line(decision, DEFAULT).endswith("progress no (flaky) -> STOP success")


def test_fixed_by_a_code_change_is_not_flaky() -> None:
    observations = [fail(0), green(1, diff="d1")]
    assert decide(DEFAULT, observations).stop_reason == "success"
    assert flaky_tests(observations) == []
    assert flaky_tests([fail(0), green(1, repair_result="diff")]) == []
    # Failed after the change, passed with no further change: that one is flaky.
    assert flaky_tests([fail(0), fail(1, diff="d1"), green(2, diff="d1")]) == [A]


def test_deterministic_stops_at_iteration_1_with_defaults() -> None:
    """The capture is the first sighting: one unchanged re-run is the second."""
    assert decide(DEFAULT, [fail(0)]).action == "continue"
    decision = decide(DEFAULT, [fail(0), fail(1)])
    assert decision.stop_reason == "repeated_fingerprint"
    assert decision.same_error_repeats == 2
    assert decision.no_progress_streak == 2
    assert decision.iteration == 1 < DEFAULT.max_iterations


def test_error_fingerprint_repeats_3_needs_two_verification_iterations() -> None:
    policy = LoopPolicy(error_fingerprint_repeats=3, no_progress_repeats=3)
    assert decide(policy, [fail(0), fail(1)]).action == "continue"
    decision = decide(policy, [fail(0), fail(1), fail(2)])
    assert decision.stop_reason == "repeated_fingerprint"
    assert decision.same_error_repeats == 3


def test_repeats_counted_even_when_the_code_changed() -> None:
    """An agent that changes code but gets the same error is still repeating it."""
    policy = LoopPolicy(error_fingerprint_repeats=3)
    history = [fail(0, diff="d0"), fail(1, diff="d1")]
    first = decide(policy, history)
    assert first.action == "continue" and first.progress_reasons == ("diff_changed",)
    decision = decide(policy, history + [fail(2, diff="d2")])
    assert decision.stop_reason == "repeated_fingerprint"
    assert "no_progress" not in decision.conditions


@pytest.mark.parametrize("repeats", [1, 2, 3, 4])
@pytest.mark.parametrize("no_progress_repeats", [1, 2, 3, 4])
@pytest.mark.parametrize("auto_replan", [False, True])
def test_deterministic_never_burns_max_iterations(repeats: int, no_progress_repeats: int, auto_replan: bool) -> None:
    policy = LoopPolicy(
        max_iterations=10,
        error_fingerprint_repeats=repeats,
        no_progress_repeats=no_progress_repeats,
        auto_replan_on_no_progress=auto_replan,
    )
    observations = [fail(0)]
    while decide(policy, observations).action == "continue":
        observations.append(fail(len(observations)))
    decision = decide(policy, observations)
    assert decision.stop_reason in ("repeated_fingerprint", "no_progress", "replan_requested")
    assert decision.iteration <= max(2, repeats) - 1
    if auto_replan and decision.stop_reason != "repeated_fingerprint":
        assert decision.stop_reason == "replan_requested"


def test_agent_path_progress_each_iteration_until_max_iterations() -> None:
    observations = [fail(0, ["F0"], diff="d0")]
    decisions = []
    for i in range(1, 4):
        observations.append(fail(i, [f"F{i}"], diff=f"d{i}"))
        decisions.append(decide(DEFAULT, observations))
    assert [d.action for d in decisions] == ["continue", "continue", "stop"]
    assert all(d.progress for d in decisions)
    assert decisions[0].progress_reasons == ("fingerprint_changed", "diff_changed")
    assert decisions[-1].stop_reason == "max_iterations"
    assert decisions[-1].no_progress_streak == 0
    assert decisions[-1].same_error_repeats == 1


def test_partial_fix_then_stuck() -> None:
    observations = [
        fail(0, ["FA", "FB"], outcomes={A: "failed", B: "failed"}),
        fail(1, ["FA"], diff="d1", outcomes={A: "failed", B: "passed"}),
    ]
    first = decide(DEFAULT, observations)
    assert first.action == "continue"
    assert first.tests_fixed == (B,) and first.progress_reasons == ("tests_fixed", "diff_changed")
    assert first.same_error_repeats == 1
    observations.append(fail(2, ["FA"], diff="d1", outcomes={A: "failed", B: "passed"}))
    decision = decide(DEFAULT, observations)
    assert decision.stop_reason == "repeated_fingerprint"
    assert handoff(observations, decision).to_json()["fixed"] == [B]


def test_timeout_retries_once_then_stops() -> None:
    first = decide(DEFAULT, [fail(0), timed_out(1)])
    assert first.action == "continue" and first.retry_timeout is True
    assert first.progress is False and first.progress_reasons == ("timeout",)
    second = decide(DEFAULT, [fail(0), timed_out(1), timed_out(2)])
    assert second.stop_reason == "timeout" and second.retry_timeout is False


def test_timeout_then_pass_is_success() -> None:
    assert decide(DEFAULT, [fail(0), timed_out(1), green(2)]).stop_reason == "success"


def test_repair_timeout_counts_as_timeout() -> None:
    history = [fail(0), fail(1, repair_result="timeout")]
    assert decide(DEFAULT, history).retry_timeout is True
    assert decide(DEFAULT, history + [fail(2, repair_result="timeout")]).stop_reason == "timeout"


def test_timeout_failure_type_at_capture_is_the_first_timeout() -> None:
    capture = fail(0, ["T"], types=[TIMEOUT])
    first = decide(DEFAULT, [capture])
    assert first.action == "continue" and first.retry_timeout is True
    assert decide(DEFAULT, [capture, fail(1, ["T"], types=[TIMEOUT])]).stop_reason == "timeout"
    assert decide(DEFAULT, [capture, green(1)]).stop_reason == "success"


def test_a_pass_after_a_capture_of_timeouts_reads_as_first_evidence_not_the_same_fingerprint() -> None:
    # The capture's failures were all timeouts (no evidence): the green re-run is the first
    # evidence, so its line must not say "fingerprint same" beside STOP success.
    capture = fail(0, ["T"], types=[TIMEOUT])
    decision = decide(DEFAULT, [capture, green(1)])
    assert decision.stop_reason == "success"
    assert progress_words(bool(decision.fingerprint_changed), bool(decision.progress), decision.progress_reasons) == (
        "fingerprint changed, progress no (first evidence)")


def test_timed_out_iterations_are_transparent_to_repeat_counting() -> None:
    history = [fail(0), timed_out(1, ["X"]), fail(2)]
    decision = decide(DEFAULT, history)
    # The capture and iteration 2 are consecutive sightings; the timeout in between says nothing.
    assert decision.same_error_repeats == 2
    assert decision.stop_reason == "repeated_fingerprint"


def test_first_timeout_does_not_exceed_max_iterations() -> None:
    decision = decide(LoopPolicy(max_iterations=1), [fail(0), timed_out(1)])
    assert decision.stop_reason == "max_iterations" and decision.retry_timeout is False


def test_no_fix_found_once_continues_twice_stops() -> None:
    first = decide(DEFAULT, [fail(0), nofix(1)])
    assert first.action == "continue"
    assert first.progress is False and first.progress_reasons == ("no_fix_found",)
    # The empty repair is not a second sighting of the failure.
    assert first.same_error_repeats == 1 and first.no_progress_streak == 1
    assert decide(DEFAULT, [fail(0), nofix(1), nofix(2)]).stop_reason == "no_fix_found"


def test_crashed_provider_counts_like_no_fix_found() -> None:
    assert decide(DEFAULT, [fail(0), fail(1, repair_result="crashed")]).action == "continue"
    history = [fail(0), fail(1, repair_result="crashed"), nofix(2)]
    assert decide(DEFAULT, history).stop_reason == "no_fix_found"


def test_no_fix_streak_is_broken_by_a_real_diff() -> None:
    policy = LoopPolicy(max_iterations=9, error_fingerprint_repeats=9, no_progress_repeats=9)
    history = [fail(0), nofix(1), fail(2, ["G"], diff="d1", repair_result="diff"), nofix(3)]
    assert decide(policy, history).action == "continue"


def test_cancelled_leaves_the_incident_open() -> None:
    decision = decide(DEFAULT, [fail(0), fail(1, ["G"], diff="d1")], cancelled=True)
    assert decision.stop_reason == "cancelled" and decision.final_status is None


def test_success_needs_every_selected_test_passed() -> None:
    decision = decide(DEFAULT, [fail(0), green(1, outcomes={A: "skipped"})])
    assert decision.stop_reason != "success"
    # A selected test skipped (or xfailed) beside a passing one verified nothing either.
    assert decide(DEFAULT, [fail(0), green(1, outcomes={A: "passed", B: "skipped"})]).stop_reason != "success"
    assert decide(DEFAULT, [fail(0), green(1, outcomes={A: "passed", B: "passed"})]).stop_reason == "success"


def test_a_timed_out_green_run_is_not_success() -> None:
    assert decide(DEFAULT, [fail(0), green(1, timed_out=True)]).stop_reason is None


def test_max_iterations_zero_never_verifies() -> None:
    assert decide(LoopPolicy(max_iterations=0), [fail(0)]).stop_reason == "max_iterations"


def test_runtime_budget_unset_never_stops() -> None:
    assert decide(DEFAULT, [fail(0)], elapsed_minutes=10_000).action == "continue"


# --------------------------------------------------------------------------- progress


def test_progress_between_reasons() -> None:
    base = fail(0, ["F"], outcomes={A: "failed", B: "missing"})
    assert progress_between(None, base).progress is False
    fixed = progress_between(base, fail(1, ["F"], diff="d9", outcomes={A: "failed", B: "passed"}))
    assert fixed.progress and fixed.tests_fixed == (B,) and not fixed.fingerprint_changed
    # The same pass with the code known to be the same: flaky, not a fix.
    flaky = progress_between(base, fail(1, ["F"], outcomes={A: "failed", B: "passed"}))
    assert (flaky.progress, flaky.progress_reasons, flaky.tests_fixed) == (False, ("flaky",), ())
    unknown_code = fail(0, ["F"], diff=None, outcomes={A: "failed", B: "missing"})
    downstream = progress_between(unknown_code, fail(1, ["G"], diff=None, outcomes={A: "failed", B: "missing"}))
    assert downstream.progress_reasons == ("fingerprint_changed",) and downstream.fingerprint_changed
    # The same tests fail with another message while the code is known to be the same: unstable.
    unstable = progress_between(base, fail(1, ["G"], outcomes={A: "failed", B: "missing"}))
    # ... judged the same failure again: "fingerprint same", as the repeat count sees it.
    assert unstable.progress is False and unstable.progress_reasons == ("message_unstable",) and not unstable.fingerprint_changed
    after_edit = progress_between(base, fail(1, ["G"], diff="d9", outcomes={A: "failed", B: "missing"}))
    assert after_edit.progress_reasons == ("fingerprint_changed", "diff_changed")
    code = progress_between(base, fail(1, ["F"], diff="d9", outcomes={A: "failed", B: "missing"}))
    assert code.progress_reasons == ("diff_changed",)
    none = progress_between(base, fail(1, ["F"], outcomes={A: "failed", B: "missing"}))
    assert none.progress is False and none.progress_reasons == ()


def test_fewer_failures_without_a_fix_is_not_progress() -> None:
    # A failing test that stops running (missing) is not fixed.
    prev = fail(0, ["FA", "FB"], outcomes={A: "failed", B: "failed"})
    cur = fail(1, ["FA"], outcomes={A: "failed", B: "missing"})
    progress = progress_between(prev, cur)
    # B ran to no verdict: not verified (never flaky); FA is the same failure seen again.
    assert (progress.progress, progress.progress_reasons, progress.fingerprint_changed) == (False, ("not_verified",), False)


def test_unknown_diff_hash_is_never_a_change() -> None:
    assert progress_between(fail(0, diff=None), fail(1, diff="d1")).progress is False
    assert progress_between(fail(0, diff="d0"), fail(1, diff=None)).progress is False


def test_counters() -> None:
    history = [fail(0), fail(1, diff="d1"), fail(2, diff="d1")]
    assert same_error_repeats(history) == 3
    assert no_progress_streak(history) == 1
    assert same_error_repeats([fail(0), green(1)]) == 0
    assert no_progress_streak([fail(0)]) == 1


def test_tests_fixed_and_flaky() -> None:
    history = [
        fail(0, ["FA", "FB"], outcomes={A: "failed", B: "failed"}),
        fail(1, ["FA"], outcomes={A: "failed", B: "passed"}),
        green(2, diff="d1", outcomes={A: "passed", B: "passed"}),
    ]
    assert fixed_tests(history) == [A, B]
    assert flaky_tests(history) == [B]


# --------------------------------------------------------------------------- decision point, handoff


@pytest.mark.parametrize("case", STOP_CASES, ids=[c[0] for c in STOP_CASES])
def test_decision_point_and_handoff_for_every_stop(case: Any) -> None:
    _name, policy, observations, kwargs, reason, _status, _it = case
    decision = decide(policy, observations, **kwargs)
    point = decision_point(decision, observations, policy, incident_id="incident_20260101_000000_r1").to_json()
    assert set(point) == {"reason", "message", "options", "context"}
    assert point["reason"] == reason and point["message"] == decision.message
    assert len(point["options"]) >= 3
    assert all(set(o) == {"id", "label", "command"} for o in point["options"])
    assert len({o["id"] for o in point["options"]}) == len(point["options"])
    ctx = point["context"]
    assert ctx["iteration"] == decision.iteration
    assert ctx["remaining"] == max(0, policy.max_iterations - decision.iteration)
    assert ctx["pendingScopeFiles"] == []
    assert set(ctx) >= {"iteration", "remaining", "failureSignature", "fingerprint", "pendingScopeFiles"}
    for option in point["options"]:
        if option["command"] and option["command"].startswith("selfheal"):
            assert "incident_20260101_000000_r1" in option["command"]
    data = handoff(observations, decision).to_json()
    assert data["iterations"] == len(observations) - 1
    assert data["fingerprints_per_iteration"] == [list(o.fingerprints) for o in observations]
    assert data["recommended_next_action"] == recommended_next_action(reason)
    json.dumps({"decision_point": point, "handoff": data, "decision": decision.to_json()})


def test_decision_point_and_handoff_match_the_run_result_schema() -> None:
    observations = [fail(0), fail(1)]
    decision = decide(DEFAULT, observations)
    doc = {
        "incident_id": "incident_20260101_000000_r1",
        "final_status": decision.final_status,
        "loops_used": decision.iteration,
        "runtime_minutes": 0.1,
        "same_error_repeats": decision.same_error_repeats,
        "archived_to": "error_archive/escalated/incident_20260101_000000_r1",
        "stop_reason": decision.stop_reason,
        "flaky_tests": flaky_tests(observations),
        "tests_fixed": fixed_tests(observations),
        "fingerprints_per_iteration": handoff(observations, decision).to_json()["fingerprints_per_iteration"],
        "decision_point": decision_point(decision, observations, DEFAULT).to_json(),
        "handoff": handoff(observations, decision).to_json(),
    }
    assert_valid("run_result", doc)


def test_decision_point_refuses_a_continue() -> None:
    decision = decide(DEFAULT, [fail(0)])
    with pytest.raises(ValueError):
        decision_point(decision, [fail(0)], DEFAULT)


def test_recommended_next_action() -> None:
    for reason in tuple(StopReason):
        assert recommended_next_action(reason).endswith(".")
    assert "Continue" in recommended_next_action(None)
    with pytest.raises(ValueError):
        recommended_next_action("bogus")


def test_status_line_is_parseable() -> None:
    stop = decide(DEFAULT, [fail(0), fail(1)])
    line = status_line(stop, DEFAULT, incident_id="incident_20260101_000000_r1")
    assert line == (
        "selfheal: incident incident_20260101_000000_r1 iteration 1 of 3: "
        "fingerprint same, progress no -> STOP repeated_fingerprint"
    )
    go = decide(DEFAULT, [fail(0), fail(1, ["G"], diff="d1")])
    assert status_line(go, DEFAULT).endswith("iteration 1 of 3: fingerprint changed, progress yes -> CONTINUE")


# --------------------------------------------------------------------------- config


def test_policy_defaults_from_default_settings() -> None:
    assert LoopPolicy.from_settings(merge_layers([]).settings) == LoopPolicy()


def test_policy_from_full_config_ignores_other_keys() -> None:
    effective = merge_layers([ConfigLayer.of(
        "project.yaml",
        {
            "enabled": False,
            "max_iterations": 8,
            "error_fingerprint_repeats": 3,
            "no_progress_repeats": 4,
            "auto_replan_on_no_progress": True,
            "max_runtime_minutes": 45,
            "apply_to": {"auto_tasks": False, "autonomous_plans": False, "tdd_tasks": True},
            "reports_dir": ".selfheal",
            "repair": {"command": ["agent"]},
        },
    )])
    policy = LoopPolicy.from_settings(effective.settings)
    assert policy == LoopPolicy(False, 8, 3, 4, True, 45.0, False, False, True)


@pytest.mark.parametrize(
    "config,key",
    [
        ({"enabled": "yes"}, "ralf_lite.enabled"),
        ({"max_iterations": True}, "ralf_lite.max_iterations"),
        ({"max_iterations": -1}, "ralf_lite.max_iterations"),
        ({"max_iterations": 2.5}, "ralf_lite.max_iterations"),
        ({"error_fingerprint_repeats": 0}, "ralf_lite.error_fingerprint_repeats"),
        ({"no_progress_repeats": "2"}, "ralf_lite.no_progress_repeats"),
        ({"max_runtime_minutes": "10"}, "ralf_lite.max_runtime_minutes"),
        ({"max_runtime_minutes": float("nan")}, "ralf_lite.max_runtime_minutes"),
        ({"apply_to": []}, "ralf_lite.apply_to"),
        ({"apply_to": {"tdd_tasks": 1}}, "ralf_lite.apply_to.tdd_tasks"),
    ],
)
def test_policy_keys_are_checked_once_by_the_config_merge(config: dict[str, Any], key: str) -> None:
    # The policy reads typed settings; the one validator of its keys is the config merge.
    with pytest.raises(ConfigError) as info:
        merge_layers([ConfigLayer.of("project.yaml", config)])
    assert str(info.value).startswith(f"project.yaml: {key}:")
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- apply_to


def test_loop_selection_apply_to() -> None:
    ids = [A, B]
    assert loop_selection(DEFAULT, ids, tdd_nodeids=[B]).nodeids == (A,)
    assert loop_selection(DEFAULT, ids, tdd_nodeids=[B]).excluded == (B,)
    assert loop_selection(LoopPolicy(tdd_tasks=True), ids, tdd_nodeids=[B]).nodeids == (A, B)
    only_tdd = loop_selection(LoopPolicy(auto_tasks=False, tdd_tasks=True), ids, tdd_nodeids=[B])
    assert only_tdd.nodeids == (B,) and only_tdd.refused is None
    nothing = loop_selection(LoopPolicy(auto_tasks=False), ids)
    assert nothing.nodeids == () and nothing.refused and "apply_to" in nothing.refused
    attended = LoopPolicy(autonomous_plans=False)
    assert loop_selection(attended, ids, unattended=True).refused
    assert loop_selection(attended, ids, unattended=True, approved=True).refused is None
    assert loop_selection(attended, ids, unattended=False).refused is None
    assert loop_selection(LoopPolicy(enabled=False), ids).refused


# --------------------------------------------------------------------------- from disk


def test_capture_and_attempt_observations() -> None:
    incident = incident_record(
        failures=[
            {"nodeid": A, "test": "t::a", "fingerprint": "FA", "failure_type": TEST_ASSERTION, "outcome": "failed"},
            {"nodeid": None, "test": "t::b", "fingerprint": "FB", "failure_type": TOOLING_ENV, "outcome": "error"},
        ]
    )
    capture = capture_observation(incident, diff_hash="d0")
    # The first TOOLING_ENV failure is what a tooling_env stop names (here without a message).
    assert capture == Observation(0, {A: "failed", "t::b": "error"}, ("FA", "FB"), (TEST_ASSERTION, TOOLING_ENV), "d0",
                                  environment="no message recorded (t::b)")
    assert "no message recorded (t::b)" in decide(DEFAULT, [capture]).message
    attempt = attempt_record(
        iteration=1,
        outcomes={A: "failed"},
        failures=[{"nodeid": A, "fingerprint": "FA", "failure_type": TEST_ASSERTION}],
        diff_hash="d1",
        timed_out=False,
        repair={"provider": "cmd", "result": "diff"},
    )
    assert observation_from_attempt(attempt) == Observation(
        1, {A: "failed"}, ("FA",), (TEST_ASSERTION,), "d1", repair_result="diff"
    )
    with pytest.raises(InputError, match="field iteration: expected integer"):
        observation_from_attempt(attempt_record(iteration="1"))
    with pytest.raises(InputError, match=r"failures\[0\] has no fingerprint"):
        observation_from_attempt(attempt_record(failures=[{}]))
    with pytest.raises(InputError, match="field repair.result: 'exploded' is not one of diff, "):
        attempt_record(repair={"result": "exploded"})  # the record refuses it when parsed
    built = attempt_record(repair={"result": "diff"})  # a record built in code: the policy still refuses it
    assert built.repair is not None
    with pytest.raises(InputError, match="unknown repair_result"):
        observation_from_attempt(dataclasses.replace(built, repair=dataclasses.replace(built.repair, result="exploded")))
    with pytest.raises(InputError, match="field failures: expected array"):
        capture_observation(incident_record(failures="nope"))
    with pytest.raises(InputError, match=r"failures\[0\] needs a nodeid/test and a fingerprint"):
        capture_observation(incident_record(failures=[{"nodeid": A}]))


def test_observation_validates_lengths_and_repair_result() -> None:
    with pytest.raises(ValueError):
        Observation(1, {}, ("a", "b"), ("X",), None)
    with pytest.raises(ValueError):
        Observation(1, {}, (), (), None, repair_result="maybe")


# --------------------------------------------------------------------------- properties

_NODEIDS = [A, B, "tests/test_c.py::test_c[1 2]"]
_OUTCOME = st.sampled_from(["passed", "failed", "error", "skipped", "missing"])


@st.composite
def observations_st(draw: Any, iteration: int) -> Observation:
    outcomes = draw(st.dictionaries(st.sampled_from(_NODEIDS), _OUTCOME, min_size=0, max_size=3))
    fps = draw(st.lists(st.sampled_from(["F", "G", "H"]), max_size=3, unique=True))
    types = tuple(draw(st.sampled_from(FAILURE_TYPES)) for _ in fps)
    return Observation(
        iteration=iteration,
        outcomes=outcomes,
        fingerprints=tuple(fps),
        failure_types=types,
        diff_hash=draw(st.sampled_from([None, "d0", "d1", "d2"])),
        timed_out=draw(st.booleans()),
        repair_result=draw(st.sampled_from([None, "diff", "no_fix_found", "timeout", "crashed"])),
        scope_denied=draw(st.sampled_from([False, False, False, True])),
    )


policies_st = st.builds(
    LoopPolicy,
    enabled=st.sampled_from([True, True, True, False]),
    max_iterations=st.integers(0, 6),
    error_fingerprint_repeats=st.integers(1, 4),
    no_progress_repeats=st.integers(1, 4),
    auto_replan_on_no_progress=st.booleans(),
    max_runtime_minutes=st.sampled_from([None, None, 1.0, 30.0]),
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies_st, data=st.data(), elapsed=st.floats(0, 60), cancelled=st.booleans())
def test_decide_returns_continue_or_exactly_one_known_stop(
    policy: LoopPolicy, data: Any, elapsed: float, cancelled: bool
) -> None:
    length = data.draw(st.integers(1, 8))
    observations = [data.draw(observations_st(i)) for i in range(length)]
    decision = decide(policy, observations, elapsed_minutes=elapsed, cancelled=cancelled)
    assert decision.action in ("continue", "stop")
    if decision.action == "continue":
        assert decision.stop_reason is None and decision.final_status is None and decision.conditions == ()
    else:
        assert decision.stop_reason in tuple(StopReason)
        assert decision.stop_reason == decision.conditions[0]
        assert list(decision.conditions) == [r for r in PRECEDENCE if r in decision.conditions]
        assert decision.final_status in ("resolved", "escalated", "replan_requested", None)
        assert not decision.retry_timeout
    # Mutually exclusive by construction (docs/loop.md).
    assert not ({"replan_requested", "no_progress"} <= set(decision.conditions))
    assert not ({"timeout", "no_fix_found"} <= set(decision.conditions))
    assert decide(policy, observations, elapsed_minutes=elapsed, cancelled=cancelled) == decision


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies_st, data=st.data())
def test_loop_driven_by_decide_stops_within_max_iterations(policy: LoopPolicy, data: Any) -> None:
    observations = [data.draw(observations_st(0))]
    while True:
        decision = decide(policy, observations)
        if decision.stopped:
            break
        assert len(observations) - 1 < policy.max_iterations
        observations.append(data.draw(observations_st(len(observations))))
    assert len(observations) - 1 <= policy.max_iterations
    assert decision.stop_reason in tuple(StopReason)


def test_a_flaky_timeout_beside_a_real_failure_does_not_void_the_observation() -> None:
    """Capture: a real failure F and a flaky timeout T. Re-run: T passes, F repeats."""
    capture = fail(0, ["F", "T"], types=["TEST_ASSERTION", TIMEOUT], outcomes={"a": "failed", "t": "failed"})
    rerun = fail(1, ["F"], types=["TEST_ASSERTION"], outcomes={"a": "failed", "t": "passed"})
    first = decide(DEFAULT, [capture, rerun])
    # The flaky timeout passing with the code unchanged is flakiness, not progress; F was
    # seen twice with the same code: deterministic.
    assert first.progress is False and first.progress_reasons == ("flaky",)
    assert first.stop_reason == "repeated_fingerprint"


def test_an_unstable_message_is_a_repeat_not_progress() -> None:
    # Same code (diff d0), same failing test, a new message each run: stops by repetition.
    history = [fail(0, ["F1"]), fail(1, ["F2"])]
    assert same_error_repeats(history) == 2 and no_progress_streak(history) == 2
    decision = decide(LoopPolicy(max_iterations=5), history)
    assert decision.stop_reason == "repeated_fingerprint" and decision.progress_reasons == ("message_unstable",)
    assert status_line(decision, LoopPolicy(max_iterations=5)).endswith(
        "fingerprint same, progress no (message unstable) -> STOP repeated_fingerprint")
    assert "(fingerprint F2; its message changes between runs) was seen 2 times" in decision.message
    # A repair diff in between is a code change: the new message is a new error.
    repaired = [fail(0, ["F1"]), fail(1, ["F2"], repair_result="diff")]
    assert same_error_repeats(repaired) == 1


# --------------------------------------------------------------------------- flaky is a verdict


def test_one_flaky_one_quarantined_one_real_does_not_burn_the_budget_as_progress() -> None:
    """No code change: the flaky test passes, the quarantined one changes its message, the
    real one repeats. Not "progress yes" on every line until max_iterations."""
    capture = fail(0, ["FL", "Q1", "R"], outcomes={"fl": "failed", "q": "failed", "r": "failed"})
    rerun = fail(1, ["Q2", "R"], outcomes={"fl": "passed", "q": "failed", "r": "failed"})
    decision = decide(LoopPolicy(max_iterations=5), [capture, rerun])
    assert decision.progress is False and decision.progress_reasons == ("flaky",)
    assert decision.stop_reason == "repeated_fingerprint" and decision.iteration == 1
    assert "progress no (flaky)" in status_line(decision, LoopPolicy(max_iterations=5))
    assert flaky_tests([capture, rerun]) == ["fl"]


def test_a_repeat_stop_never_reads_fingerprint_changed() -> None:
    """The demo's case: a real bug and a flaky test; the flaky one passes on the re-run, the
    bug repeats. The line said "fingerprint changed, progress no (flaky) -> STOP repeated_fingerprint"."""
    capture = fail(0, ["BUG", "FL"], outcomes={"bug": "failed", "fl": "failed"})
    rerun = fail(1, ["BUG"], outcomes={"bug": "failed", "fl": "passed"})
    decision = decide(DEFAULT, [capture, rerun])
    assert decision.stop_reason == "repeated_fingerprint"
    assert status_line(decision, DEFAULT).endswith("fingerprint same, progress no (flaky) -> STOP repeated_fingerprint")
    assert "(fingerprint BUG) was seen 2 times" in decision.message
    # The flaky failure came first at capture: the stop names the one repeated, and says so.
    flaky_first = fail(0, ["FL", "BUG"], outcomes={"fl": "failed", "bug": "failed"})
    message = decide(DEFAULT, [flaky_first, rerun]).message
    assert "(fingerprint BUG; not the capture's first failure (FL), which no longer fails) was seen 2" in message


def test_a_failing_test_that_skips_is_not_verified_never_flaky() -> None:
    capture = fail(0, ["F", "G"], outcomes={A: "failed", B: "failed"})
    rerun = fail(1, ["F"], outcomes={A: "failed", B: "skipped"})
    decision = decide(LoopPolicy(max_iterations=5), [capture, rerun])
    assert decision.progress_reasons == ("not_verified",) and flaky_tests([capture, rerun]) == []
    line = status_line(decision, LoopPolicy(max_iterations=5))
    assert "progress no (not verified)" in line and "flaky" not in line
    # A pass beside the skip is still a flaky pass.
    passed = fail(1, ["F"], outcomes={A: "failed", B: "passed"})
    assert decide(LoopPolicy(max_iterations=5), [capture, passed]).progress_reasons == ("flaky",)


def test_a_harness_changed_stop_is_never_progress() -> None:
    rerun = fail(1, ["G"], diff="d9", harness_changed=("pytest.ini: addopts",))
    decision = decide(DEFAULT, [fail(0), rerun])
    assert decision.stop_reason == "harness_changed" and decision.progress is False
    assert "progress no (not judged) -> STOP harness_changed" in status_line(decision, DEFAULT)


def test_a_failure_the_history_calls_flaky_is_not_escalated_as_deterministic() -> None:
    history = [fail(0, outcomes={"q": "failed"}), fail(1, outcomes={"q": "failed"})]
    assert decide(DEFAULT, history).stop_reason == "repeated_fingerprint"
    known = decide(DEFAULT, history, known_flaky={"q"})
    assert known.action == "continue"  # re-run: it may pass, the budget still bounds it
    history += [fail(2, outcomes={"q": "failed"}), fail(3, outcomes={"q": "failed"})]
    last = decide(DEFAULT, history, known_flaky={"q"})
    assert last.stop_reason == "max_iterations"
    assert "known flaky in the failure history (q)" in last.message
    # With a real failure beside it, the repeat is evidence again.
    mixed = [fail(0, outcomes={"q": "failed", "r": "failed"}), fail(1, outcomes={"q": "failed", "r": "failed"})]
    assert decide(DEFAULT, mixed, known_flaky={"q"}).stop_reason == "repeated_fingerprint"


def test_known_flaky_reads_the_capture_triage() -> None:
    incident = incident_record(failures=[
        {"nodeid": "t::a", "fingerprint": "f1", "triage": {"label": "flaky", "detail": "rate"}},
        {"nodeid": "t::b", "fingerprint": "f2", "triage": {"label": "quarantined", "detail": "q"}},
        {"nodeid": "t::c", "fingerprint": "f3", "triage": {"label": "new", "detail": ""}},
    ])
    assert known_flaky(incident) == frozenset({"t::a", "t::b"})


def test_lines_that_list_node_ids_are_bounded() -> None:
    """10,000 flaky tests beside a real bug made one 365 KB escalation line."""
    flaky = [f"t.py::test_{n}" for n in range(10_000)]
    capture = fail(0, ["BUG"], outcomes={"bug": "failed", **{n: "failed" for n in flaky}})
    rerun = fail(1, ["BUG"], outcomes={"bug": "failed", **{n: "passed" for n in flaky}})
    green_run = green(1, outcomes={n: "passed" for n in flaky})
    success = decide(DEFAULT, [fail(0, outcomes={n: "failed" for n in flaky}), green_run])
    assert success.stop_reason == "success" and success.message.endswith("t.py::test_4 and 9,995 more.")
    assert len(success.message) < 300
    known = decide(DEFAULT, [capture, rerun], known_flaky={"bug"})
    assert len(known.message) < 600
    argv = ["python", "-m", "pytest", "-q", *flaky, "-p", "no:randomly"]
    assert command_shown(argv) == ("python -m pytest -q t.py::test_0 t.py::test_1 t.py::test_2 t.py::test_3 "
                                   "t.py::test_4 (+9,995 more test ids) -p no:randomly")
    few = ["python", "-m", "pytest", "a b.py::t", "c.py::u"]
    assert command_shown(few) == shlex.join(few)


def test_every_printed_option_exists_for_this_incident() -> None:
    # An option that applies a patch is offered only when a repair proposed one: an agent's
    # test edit in the working tree has no final.patch to apply.
    observations = [fail(0), green(1, diff="d1", repair_result="diff", tests_edited=("tests/test_calc.py",))]
    decision = decide(DEFAULT, observations)
    commands = {proposed: [o["command"] for o in decision_point(decision, observations, DEFAULT, incident_id="i1",
                                                                 patch_proposed=proposed).to_json()["options"]]
                for proposed in (True, False)}
    assert "selfheal apply i1 --allow-test-edits" in commands[True]
    assert not any(str(c).startswith("selfheal apply") for c in commands[False]) and commands[False]
    assert "selfheal apply" not in recommended_next_action("tests_edited", "i1")
    # No provider is named as if there were one: an empty repair may be an agent's unchanged run.
    for reason in tuple(StopReason):
        assert "repair provider produced" not in recommended_next_action(reason)


def test_a_stop_before_any_run_names_no_fingerprint() -> None:
    decision = decide(DEFAULT, [fail(0)], cancelled=True)
    line = status_line(decision, DEFAULT, incident_id="i1")
    assert line.endswith(": no verification ran, no fingerprint -> STOP cancelled"), line
    assert "fingerprint changed" not in line and "first evidence" not in line
