"""``replay.replay`` (pure: events → loop state) and, for every stop reason the driver can
reach, a real loop whose replayed state equals the state on disk."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import (
    TOOLING,
    assert_files_valid,
    assert_replay_equals_disk,
    attempt_record,
    capture,
    deterministic_project,
    events_named,
    flaky_project,
    hanging_project,
    loop_in_process,
    make_project,
    moving_project,
)

from pytest_selfheal.config.settings import merge_layers
from pytest_selfheal.errors import Cancelled
from pytest_selfheal.loop import policy
from pytest_selfheal.loop.attempts import build_run_result
from pytest_selfheal.loop.policy import final_status_of
from pytest_selfheal.loop.replay import COMPARED_KEYS, differences, replay
from pytest_selfheal.loop.state import pending_stop
from pytest_selfheal.records.attempt import RepairBlock
from pytest_selfheal.records.vocab import StopReason
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.root import Store

ID = "incident_20260217_120000_ab12cd"

# --------------------------------------------------------------------------- pure replay


def _ev(name: str, **data: Any) -> Event:
    doc = dict({"ts": "2026-02-17T12:00:00.000000+00:00", "event": name, "incident_id": ID}, **data)
    return Event.from_json(doc, "test")


def _vf(iteration: int, result: str = "continue", stop: Optional[str] = None, fps: tuple[str, ...] = ("f1",)) -> Event:
    return _ev("verification_finished", iteration=iteration, result=result, stop_reason=stop,
               verification_passed=not fps, fingerprints=list(fps))


def test_replay_of_a_closed_loop() -> None:
    events = [
        _ev("incident_captured", status="new"),
        _ev("failure_classified", fingerprint="f1"),
        _ev("plan_generated"),
        _ev("status_changed", **{"from": "new", "to": "planned"}),
        _ev("status_changed", **{"from": "planned", "to": "running"}),
        _vf(1),
        _vf(2, "stop", "repeated_fingerprint"),
        _ev("repeated_failure_detected", iteration=2),
        _ev("decision_point_needed", iteration=2, stop_reason="repeated_fingerprint"),
        _ev("loop_stopped", iteration=2, stop_reason="repeated_fingerprint", final_status="escalated"),
        _ev("status_changed", **{"from": "running", "to": "escalated"}),
        _ev("incident_archived", bucket="escalated", archived_to=f"error_archive/escalated/{ID}"),
    ]
    state = replay(events).to_json()
    assert {k: state[k] for k in COMPARED_KEYS} == {
        "incident_id": ID,
        "status": "escalated",
        "bucket": "escalated",
        "iterations": [
            {"iteration": 1, "verification_passed": False, "fingerprints": ["f1"], "result": "continue", "stop_reason": None},
            {"iteration": 2, "verification_passed": False, "fingerprints": ["f1"], "result": "stop",
             "stop_reason": "repeated_fingerprint"},
        ],
        "stop_reason": "repeated_fingerprint",
        "final_status": "escalated",
        "archived_to": f"error_archive/escalated/{ID}",
    }
    assert state["loop_stops"] == [{"iteration": 2, "stop_reason": "repeated_fingerprint", "final_status": "escalated"}]


def test_replay_is_order_tolerant_and_ignores_unknown_events() -> None:
    events = [
        _ev("incident_captured", status="new"),
        _vf(2, fps=()),
        _ev("something_new", iteration=7),
        _vf(1),
        _vf(2, "stop", "success", fps=()),  # a recovered record of an iteration: the last one wins
        Event.from_json({"event": "verification_finished", "iteration": "x"}, "test"),  # not a number: ignored
    ]
    state = replay(events).to_json()
    assert [i["iteration"] for i in state["iterations"]] == [1, 2]
    assert state["stop_reason"] == "success" and state["final_status"] == "resolved"
    assert state["status"] == "new" and state["bucket"] == "inbox" and state["archived_to"] is None


def test_open_stops_and_stops_in_force() -> None:
    base = [_ev("incident_captured", status="new"), _vf(1)]
    cancelled = replay(base + [_ev("loop_stopped", iteration=1, stop_reason="cancelled", final_status=None)])
    assert cancelled.stop_reason is None and cancelled.loop_stops[0].stop_reason == "cancelled"
    # A close-out decided between iterations belongs to the latest iteration.
    budget = replay(base + [_ev("loop_stopped", iteration=1, stop_reason="runtime_budget", final_status="escalated")])
    assert budget.stop_reason == "runtime_budget"
    # A replan's close-out stops being in force once a new run records an iteration.
    replanned = replay(base[:1] + [_vf(1, "stop", "replan_requested"),
                                   _ev("loop_stopped", iteration=1, stop_reason="replan_requested",
                                       final_status="replan_requested"), _vf(2)])
    assert replanned.stop_reason is None and replanned.final_status is None
    assert replay([]).incident_id is None


def test_final_status_of_every_stop_reason() -> None:
    assert {r: final_status_of(r) for r in tuple(StopReason)} == {
        "success": "resolved", "max_iterations": "escalated", "repeated_fingerprint": "escalated",
        "no_progress": "escalated", "replan_requested": "replan_requested", "runtime_budget": "escalated",
        "tooling_env": "escalated", "timeout": "escalated", "no_fix_found": "escalated", "regression": "escalated",
        "scope_expansion_denied": "escalated", "provider_escaped": "escalated", "cancelled": None, "disabled": None,
        "tests_edited": "escalated", "unverified_failures": "escalated", "harness_changed": "escalated",
    }


@pytest.mark.parametrize("reason", tuple(StopReason))
def test_driver_and_replay_agree_on_the_final_status(reason: str) -> None:
    """For every stop reason the driver's close-out and the event replay give one final status."""
    # The driver: a stop recorded in attempt 1 without its final status, rebuilt on resume
    # (pending_stop) and closed out (build_run_result, what finalize writes and logs).
    attempt = attempt_record(iteration=1, result="stop", stop_reason=reason)
    decision = pending_stop([attempt], None, "running")
    assert decision is not None and decision.stop_reason == reason
    capture = policy.Observation(0, {"t.py::t": "failed"}, ("f1",), ("UNKNOWN",), None)
    result = build_run_result(ID, decision, observations=[capture], attempts=[attempt], pol=policy.LoopPolicy(),
                              failure_signature=None, effective=merge_layers([]))
    # The replay: the events finalize appends for that stop.
    replayed = replay([
        _ev("incident_captured", status="new"),
        _vf(1, "stop", reason),
        _ev("loop_stopped", iteration=1, stop_reason=reason, final_status=result.final_status),
    ])
    assert replayed.stop_reason == reason
    assert replayed.final_status == result.final_status == decision.final_status
    open_stop = reason in (StopReason.CANCELLED, StopReason.DISABLED)
    assert (result.final_status is None) == open_stop
    assert (result.archived_to is None) == (open_stop or reason == StopReason.REPLAN_REQUESTED)


def test_differences_name_the_key() -> None:
    state = replay([_ev("incident_captured", status="new")])
    other = dataclasses.replace(state, status="planned")
    assert differences(state, state) == []
    assert differences(state, other) == ["status: events say 'new', files say 'planned'"]


# --------------------------------------------------------------------------- every stop reason

Scenario = Callable[[Path], tuple[Path, str, dict[str, Any]]]


def _simple(make: Callable[[Path], Path], *settings: str, **kwargs: Any) -> Scenario:
    def scenario(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
        project = make(tmp_path)
        # The judging keys in force at the capture judge the incident: set them there.
        incident_id = capture(project, *(f"--selfheal-set={s}" for s in settings))
        return project, incident_id, loop_in_process(project, incident_id, *settings, **kwargs)

    return scenario


def _no_fix(**request: Any) -> RepairBlock:
    return RepairBlock.from_json({"provider": "fake", "result": "no_fix_found", "files_changed": [], "patch": None}, "fake")


def _denied(**request: Any) -> RepairBlock:
    return RepairBlock.from_json({"provider": "fake", "result": "diff", "files_changed": ["setup.py"], "patch": "",
                                  "scope_denied": True}, "fake")


def _escaped(**request: Any) -> RepairBlock:
    return RepairBlock.from_json({"provider": "fake", "result": "crashed", "files_changed": [], "patch": None,
                                  "provider_escaped": ["calc.py", ".git/hooks/post-checkout"]}, "fake")


def _cancelled(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A real SIGTERM to this process while the loop is inside its (repair) step."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    calls: list[int] = []

    def provider(**request: Any) -> None:
        calls.append(request["iteration"])
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Cancelled, match="cancelled by SIGTERM"):
        loop_in_process(project, incident_id, provider=provider)
    assert calls == [1]
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored
    return project, incident_id, {"stop_reason": "cancelled", "final_status": None}


def _tests_edited(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A provider (allowed to edit tests) that makes the selection pass by editing the test file."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)

    def provider(**request: Any) -> RepairBlock:
        test_file = project / "test_calc.py"
        test_file.write_text(test_file.read_text().replace("return a + b", "return a - b"))
        return RepairBlock.from_json({"provider": "fake", "result": "diff", "files_changed": ["test_calc.py"],
                                      "patch": None, "tests_edited": ["test_calc.py"]}, "fake")

    return project, incident_id, loop_in_process(project, incident_id, "repair.allow_test_edits=true",
                                                 provider=provider)


def _unverified(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A flaky capture whose incident counted one failure over the capture's cap."""
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    store.update_incident(incident_id, unverified_failures=1)
    return project, incident_id, loop_in_process(project, incident_id)


def _harness_changed(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """The tests' package gains an __init__.py after the capture (the seal, docs/loop.md)."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    (project / "__init__.py").write_text("")
    return project, incident_id, loop_in_process(project, incident_id)


def _regression(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A provider that fixes the failing test by changing a helper another test relies on."""
    project = make_project(tmp_path / "reg", {"calc.py": "def one():\n    return 1\n\n\ndef two():\n    return 3\n",
                                              "test_calc.py": "from calc import two\n\n\ndef test_two():\n"
                                                              "    assert two() == 2\n",
                                              "test_one.py": "from calc import one\n\n\ndef test_one():\n"
                                                             "    assert one() == 1\n"})
    incident_id = capture(project, "test_calc.py", "--selfheal-set=max_iterations=1")

    def provider(**request: Any) -> RepairBlock:
        (project / "calc.py").write_text("def one():\n    return 2\n\n\ndef two():\n    return one()\n")
        return RepairBlock.from_json({"provider": "fake", "result": "diff", "files_changed": ["calc.py"],
                                      "patch": None}, "fake")

    return project, incident_id, loop_in_process(project, incident_id, "max_iterations=1", provider=provider)


def _tooling(tmp_path: Path) -> Path:
    return make_project(tmp_path / "env", {"test_env.py": TOOLING})


SCENARIOS: dict[str, tuple[Scenario, int, str]] = {
    # stop reason: (scenario, attempts on disk, bucket)
    "success": (_simple(flaky_project), 1, "resolved"),
    "repeated_fingerprint": (_simple(deterministic_project), 1, "escalated"),
    "no_progress": (_simple(deterministic_project, "error_fingerprint_repeats=5", "no_progress_repeats=2"), 1, "escalated"),
    "replan_requested": (_simple(deterministic_project, "auto_replan_on_no_progress=true"), 1, "inbox"),
    "max_iterations": (_simple(moving_project, "max_iterations=2"), 2, "escalated"),
    "tooling_env": (_simple(_tooling), 0, "escalated"),
    "timeout": (_simple(hanging_project, "verification.timeout_seconds=1"), 2, "escalated"),
    "runtime_budget": (_simple(moving_project, "max_runtime_minutes=0.001"), 1, "escalated"),
    "cancelled": (_cancelled, 0, "inbox"),
    "no_fix_found": (_simple(deterministic_project, provider=_no_fix), 2, "escalated"),
    "scope_expansion_denied": (_simple(deterministic_project, provider=_denied), 1, "escalated"),
    "provider_escaped": (_simple(deterministic_project, provider=_escaped), 1, "escalated"),
    "disabled": (_simple(deterministic_project, "enabled=false"), 0, "inbox"),
    "tests_edited": (_tests_edited, 1, "escalated"),
    "unverified_failures": (_unverified, 1, "escalated"),
    "harness_changed": (_harness_changed, 1, "escalated"),
    "regression": (_regression, 1, "escalated"),
}


def test_every_stop_reason_has_a_scenario() -> None:
    assert sorted(SCENARIOS) == sorted(tuple(StopReason))


# A sample of the stop reasons by default (a stop that resolves, one by repetition, one by
# no progress, one by an edited test, one by the environment, one disabled); the slow tier
# replays every reason (test_driver_and_replay_agree_on_the_final_status above covers each
# reason's final status in-process by default).
DEFAULT_REPLAYS = {"success", "repeated_fingerprint", "no_progress", "tests_edited", "tooling_env", "disabled"}


@pytest.mark.parametrize("reason", [r if r in DEFAULT_REPLAYS else pytest.param(r, marks=pytest.mark.slow)
                                    for r in sorted(SCENARIOS)])
def test_replay_equals_disk_for_every_stop_reason(tmp_path: Path, reason: str) -> None:
    scenario, attempts, bucket = SCENARIOS[reason]
    project, incident_id, result = scenario(tmp_path)
    store = Store(project / ".selfheal")
    assert result["stop_reason"] == reason
    assert result["final_status"] == final_status_of(reason)
    assert store.count_attempts(incident_id) == attempts
    assert store.locate(incident_id)[0] == bucket
    assert_files_valid(store, incident_id)
    replayed = assert_replay_equals_disk(store, incident_id)
    assert replayed["loop_stops"][-1]["stop_reason"] == reason
    if reason in ("cancelled", "disabled"):
        # Open stops: nothing final on disk, the incident is resumable.
        assert store.read_run_result(incident_id) is None
        assert replayed["stop_reason"] is None
        assert store.read_status(incident_id) == ("running" if reason == "cancelled" else "planned")
    else:
        assert replayed["stop_reason"] == reason
        run_result = store.read_run_result(incident_id)
        assert run_result is not None and run_result.stop_reason == reason
        assert run_result.decision_point is not None and run_result.decision_point.reason == reason
        assert run_result.handoff is not None and run_result.handoff.recommended_next_action
    # Every stop wrote exactly one decision point and one loop_stopped.
    assert len(events_named(store, incident_id, "decision_point_needed")) == 1
    assert len(events_named(store, incident_id, "loop_stopped")) == 1
