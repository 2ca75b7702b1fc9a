"""The loop driver in-process (``loop.run_loop`` / ``record_iteration`` / ``finalize``) on real
pytest projects in real git repos: every verification is a real subprocess (the projects and
checks shared with test_loop_cli.py, test_replay.py and test_crash_safety.py live in helpers.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import (
    PY,
    assert_files_valid,
    assert_replay_equals_disk,
    attempt_record,
    capture,
    deterministic_project,
    effective_config,
    events_named,
    flaky_project,
    loop_in_process,
    run_env,
)

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.loop import policy
from pytest_selfheal.loop.attempts import finalize, record_iteration
from pytest_selfheal.loop.control import loop_lock
from pytest_selfheal.loop.driver import _exclude_from_argvs, selection_nodeids
from pytest_selfheal.loop.messages import status_line
from pytest_selfheal.loop.state import LoopRun, pending_stop, split_runs
from pytest_selfheal.loop.verify import VerificationRun
from pytest_selfheal.records.attempt import Attempt, RepairBlock
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.store.root import Store

# --------------------------------------------------------------------------- pure helpers


def _attempt(iteration: int, result: str = "continue", stop_reason: Optional[str] = None, **more: Any) -> Attempt:
    return attempt_record(iteration=iteration, result=result, stop_reason=stop_reason, outcomes={}, failures=[], **more)


def test_split_runs_starts_a_fresh_run_after_a_replan() -> None:
    attempts = [_attempt(1), _attempt(2, "stop", "replan_requested"), _attempt(3), _attempt(4)]
    baseline, run = split_runs(attempts)
    assert baseline is not None and baseline.iteration == 2
    assert [a.iteration for a in run] == [3, 4]
    assert split_runs(attempts[:1]) == (None, attempts[:1])


def test_split_runs_and_pending_stop_after_a_reopen() -> None:
    escalated = _attempt(2, "stop", "repeated_fingerprint",
                         decision={"action": "stop", "stop_reason": "repeated_fingerprint"})
    attempts = [_attempt(1), escalated, _attempt(3)]
    # Reopened after attempt 2: the new run starts after it, with attempt 2 as its baseline.
    baseline, run = split_runs(attempts, 2)
    assert baseline is not None and baseline.iteration == 2 and [a.iteration for a in run] == [3]
    # Reopened before any attempt: the capture stays the baseline; a later replan still cuts.
    assert split_runs(attempts, 0) == (None, attempts)
    replanned = [_attempt(1), _attempt(2, "stop", "replan_requested"), _attempt(3)]
    assert split_runs(replanned, 1)[0] == replanned[1]
    # The stop before the reopen is history while the incident is open again (planned, or
    # running before the new run's first attempt), and pending again once it closes again.
    assert pending_stop(attempts[:2], None, "planned", reopened=2) is None
    assert pending_stop(attempts[:2], None, "running", reopened=2) is None
    decision = pending_stop(attempts[:2], None, "escalated", reopened=2)
    assert decision is not None and decision.stop_reason == "repeated_fingerprint"
    assert pending_stop(attempts[:2], None, "running") is not None  # never reopened


def test_pending_stop_prefers_the_newest_record() -> None:
    stop = {"action": "stop", "stop_reason": "repeated_fingerprint", "iteration": 1}
    attempts = [_attempt(1, "stop", "repeated_fingerprint", decision=stop)]
    decision = pending_stop(attempts, None, "running")
    assert decision is not None and decision.stop_reason == "repeated_fingerprint"
    # A run result of the same iteration wins (e.g. a stop decided between iterations).
    later = RunResult.from_json({"incident_id": "incident_20260217_120000_ab12cd", "final_status": "escalated", "loops_used": 1,
                                 "runtime_minutes": 0.0, "same_error_repeats": 0, "archived_to": None, "iteration": 1,
                                 "stop_reason": "runtime_budget", "decision": {"action": "stop", "stop_reason": "runtime_budget"}}, "test")
    decision = pending_stop(attempts, later, "running")
    assert decision is not None and decision.stop_reason == "runtime_budget"
    # A run result of an older iteration does not.
    assert pending_stop([_attempt(1), _attempt(2)], later, "running") is None
    # A completed replan is not pending.
    replan = [_attempt(1, "stop", "replan_requested", decision={"action": "stop", "stop_reason": "replan_requested"})]
    assert pending_stop(replan, None, "planned") is None
    assert pending_stop(replan, None, "plan_proposed") is not None


def test_status_line_grammar() -> None:
    progress = policy.progress_signal(False, (), False, ())
    stop = policy.decision(progress, "repeated_fingerprint", "m", 1, 2, 2)
    line = status_line(stop, policy.LoopPolicy(max_iterations=3), incident_id="incident_20260101_000000_ab")
    assert line == (
        "selfheal: incident incident_20260101_000000_ab iteration 1 of 3: "
        "fingerprint same, progress no -> STOP repeated_fingerprint"
    )
    go = policy.decision(policy.progress_signal(True, ("tests_fixed",), True, ("t",)), None, "m", 2)
    assert status_line(go, policy.LoopPolicy(max_iterations=3), incident_id="incident_20260101_000000_ab").endswith(
        "iteration 2 of 3: fingerprint changed, progress yes -> CONTINUE"
    )


# --------------------------------------------------------------------------- run_loop


def test_flaky_test_resolves_and_is_flagged(tmp_path: Path) -> None:
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    lines: list[str] = []
    result = loop_in_process(project, incident_id, out=lines.append)
    store = Store(project / ".selfheal")
    assert result["stop_reason"] == "success" and result["final_status"] == "resolved"
    assert result["flaky_tests"] == ["test_flaky.py::test_flaky"]
    assert result["loops_used"] == 1
    assert store.locate(incident_id)[0] == "resolved"
    assert result["archived_to"] == f"error_archive/resolved/{incident_id}"
    assert any(line.endswith("-> STOP success") for line in lines)
    assert_files_valid(store, incident_id)
    assert_replay_equals_disk(store, incident_id)


def test_the_driver_verifies_through_the_injected_verifier(tmp_path: Path) -> None:
    """The Verifier seam: a verifier that reports the captured test passing (no subprocess)
    is what the driver observes — success, with no code change: flaky, not a fix."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    calls: list[tuple[list[str], bool]] = []

    def verifier(argv: Sequence[str], *, cwd: Path, junit_path: Path, timeout_seconds: Optional[float],
                 env: Optional[Mapping[str, str]] = None, invocation_dir: Optional[Path] = None,
                 selection_file: Optional[Path] = None, judged: bool = False) -> VerificationRun:
        calls.append((list(argv), judged))
        junit_path.write_text('<testsuite name="pytest" tests="1">'
                              '<testcase classname="test_calc" name="test_sub" time="0.01"/></testsuite>')
        return VerificationRun(list(argv), 0, False, 0.01, "1 passed", junit_path)

    result = loop_in_process(project, incident_id, verifier=verifier)
    # A passing selection with nothing broken runs again, its comparisons judged, before it is a success.
    assert [judged for _, judged in calls] == [False, True] and all("test_calc.py::test_sub" in a for a, _ in calls)
    assert result["stop_reason"] == "success" and result["flaky_tests"] == ["test_calc.py::test_sub"]
    attempt = Store(project / ".selfheal").read_attempts(incident_id)[0]
    assert attempt.outcomes == {"test_calc.py::test_sub": "passed"} and attempt.verification_passed


def test_deterministic_failure_stops_by_repetition_not_by_budget(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    result = loop_in_process(project, incident_id)
    store = Store(project / ".selfheal")
    assert result["stop_reason"] == "repeated_fingerprint"
    assert result["loops_used"] == 1 and result["same_error_repeats"] == 2
    assert result["flaky_tests"] == [] and result["tests_fixed"] == []
    assert store.locate(incident_id)[0] == "escalated"
    attempt = store.read_attempts(incident_id)[0]
    assert attempt.result == "stop" and attempt.verification_passed is False
    assert attempt.outcomes == {"test_calc.py::test_sub": "failed"}
    assert attempt.diff_hash and attempt.mode == "verify"
    assert result["decision_point"]["reason"] == "repeated_fingerprint"
    assert result["handoff"]["iterations"] == 1
    assert len(events_named(store, incident_id, "repeated_failure_detected")) == 1
    assert_files_valid(store, incident_id)
    assert_replay_equals_disk(store, incident_id)


def test_a_second_loop_on_the_same_incident_is_refused(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    holder = subprocess.Popen(
        [PY, "-c", "import sys, time; from pytest_selfheal.loop.control import loop_lock; from pytest_selfheal.store.root import Store\n"
                   "with loop_lock(Store(sys.argv[1]), sys.argv[2]):\n    print('held', flush=True); time.sleep(30)",
         str(store.root), incident_id],
        stdout=subprocess.PIPE, text=True, env=run_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RefusedError, match="already running"):
            loop_in_process(project, incident_id)
    finally:
        holder.kill()
        holder.wait()
    assert store.count_attempts(incident_id) == 0
    with loop_lock(store, incident_id):  # released by the dead holder
        pass




def test_replan_requested_regenerates_the_plan_and_a_resume_starts_a_new_run(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    result = loop_in_process(project, incident_id, "auto_replan_on_no_progress=true")
    assert result["stop_reason"] == "replan_requested" and result["final_status"] == "replan_requested"
    assert result["archived_to"] is None
    assert store.read_status(incident_id) == "planned" and store.locate(incident_id)[0] == "inbox"
    plan = store.read_plan(incident_id)
    assert plan.revision == 2 and plan.replanned_at_iteration == 1
    statuses = [(e["from"], e["to"]) for e in events_named(store, incident_id, "status_changed")]
    assert ("running", "plan_proposed") in statuses and ("plan_proposed", "planned") in statuses
    assert_replay_equals_disk(store, incident_id)
    # The next loop is a new run on the new plan: attempt 2, baseline = attempt 1.
    again = loop_in_process(project, incident_id)
    assert again["stop_reason"] == "repeated_fingerprint" and again["loops_used"] == 1
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1, 2]
    assert store.locate(incident_id)[0] == "escalated"
    assert_replay_equals_disk(store, incident_id)








def test_autonomous_plans_false_refuses_unattended_loops_without_approval(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    result = loop_in_process(project, incident_id, "apply_to.autonomous_plans=false", unattended=True)
    assert result["stop_reason"] == "disabled" and "autonomous_plans" in result["message"]
    approved = loop_in_process(project, incident_id, "apply_to.autonomous_plans=false", unattended=True, approve=True)
    assert approved["stop_reason"] == "repeated_fingerprint"






# --------------------------------------------------------------------------- the provider seam


def test_provider_seam_no_fix_found(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    calls: list[dict[str, Any]] = []

    def provider(**request: Any) -> RepairBlock:
        calls.append(request)
        return RepairBlock.from_json({"provider": "fake", "result": "no_fix_found", "files_changed": [], "patch": None},
                                     "fake")

    result = loop_in_process(project, incident_id, provider=provider)
    store = Store(project / ".selfheal")
    assert result["stop_reason"] == "no_fix_found" and result["loops_used"] == 2
    assert [c["iteration"] for c in calls] == [1, 2]
    assert calls[0]["last_attempt"] is None and calls[1]["last_attempt"].iteration == 1
    assert calls[0]["plan"].incident_id == incident_id and calls[0]["store"].root == store.root
    attempts = store.read_attempts(incident_id)
    assert [a.mode for a in attempts] == ["repair", "repair"]
    assert attempts[0].repair is not None and attempts[0].repair.result == "no_fix_found"
    assert_replay_equals_disk(store, incident_id)




def test_provider_returning_none_is_verify_only(tmp_path: Path) -> None:
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    result = loop_in_process(project, incident_id, provider=lambda **request: None)
    assert result["stop_reason"] == "success"
    assert Store(project / ".selfheal").read_attempts(incident_id)[0].mode == "verify"


# --------------------------------------------------------------------------- record_iteration (agent mode)


def _failure(nodeid: str, fingerprint: str, failure_type: str = "TEST_ASSERTION") -> Failure:
    return Failure(test=nodeid.replace(".py", "").replace("/", "."), fingerprint=fingerprint,
                   signature=f"{failure_type} | {nodeid} | boom {fingerprint}", scheme=1, failure_type=failure_type,
                   code_fixable=True, transient=False, failure_class="deterministic", message="boom",
                   outcome="failed", nodeid=nodeid)


def test_record_iteration_agent_mode_sees_a_code_change_and_resolves(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    effective = effective_config(project)
    nodeid = "test_calc.py::test_sub"
    fp = store.read_incident(incident_id).fingerprint
    common = dict(effective=effective, mode="agent", verification_commands=["python -m pytest"],
                  project_root=project, exit_code=1)
    first = record_iteration(LoopRun.resume(store, incident_id), outcomes={nodeid: "failed"}, failures=[_failure(nodeid, "other")],
                             diff_hash="aaaa", started_at="2026-01-01T00:00:00+00:00",
                             finished_at="2026-01-01T00:00:05+00:00", **common)
    assert not first.closed and first.attempt is not None and first.attempt.iteration == 1
    assert first.status_line.endswith("iteration 1 of 3: fingerprint changed, progress yes -> CONTINUE")
    assert store.read_status(incident_id) == "running"
    # Outcomes cover the incident's selection; a failure elsewhere is a new failure.
    second = record_iteration(LoopRun.resume(store, incident_id), outcomes={nodeid: "passed"}, failures=[],
                              new_failures=[_failure("test_new.py::t", "new")], diff_hash="bbbb",
                              started_at="2026-01-01T00:01:00+00:00", finished_at="2026-01-01T00:01:30+00:00",
                              **common)
    assert second.closed and second.decision.stop_reason == "success"
    assert second.attempt is not None and second.attempt.new_failures[0].fingerprint == "new"
    assert second.run_result is not None and second.run_result.runtime_minutes == 1.5
    assert second.run_result.tests_fixed == (nodeid,) and second.run_result.flaky_tests == ()
    assert fp in second.run_result.to_json()["fingerprints_per_iteration"][0]
    assert store.locate(incident_id)[0] == "resolved"
    with pytest.raises(RefusedError, match="already archived"):
        record_iteration(LoopRun.resume(store, incident_id), outcomes={}, failures=[], diff_hash=None,
                         started_at="2026-01-01T00:02:00+00:00", finished_at="2026-01-01T00:02:01+00:00",
                         **common)
    assert_files_valid(store, incident_id)
    assert_replay_equals_disk(store, incident_id)


def test_finalize_is_idempotent(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    effective = effective_config(project, "max_iterations=5")
    nodeid = "test_calc.py::test_sub"
    outcome = record_iteration(
        LoopRun.resume(store, incident_id), effective=effective, outcomes={nodeid: "failed"},
        failures=[_failure(nodeid, "zzz")], diff_hash=None, started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:00:01+00:00", mode="agent", verification_commands=[], exit_code=1,
        project_root=project,
    )
    assert not outcome.closed
    stop = policy.decision(policy.progress_signal(False, (), False, ()), "max_iterations", "All iterations are used.", 1,
                           1, 1, conditions=("max_iterations",))
    # Run the close-out's first half twice (as a resume after a kill would), then completely.
    observations = LoopRun.read(store, incident_id).observations()
    first = finalize(LoopRun.resume(store, incident_id), stop, effective=effective, observations=observations,
                     project_root=project)
    again = finalize(LoopRun.resume(store, incident_id), stop, effective=effective, observations=observations,
                     project_root=project)
    assert first == again
    for name in ("decision_point_needed", "loop_stopped", "incident_archived"):
        assert len(events_named(store, incident_id, name)) == 1, name
    assert store.locate(incident_id)[0] == "escalated"
    assert_replay_equals_disk(store, incident_id)


def test_run_result_records_effective_config_with_origins_and_redacts_secrets(tmp_path: Path) -> None:
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    secret = "s3cr3t-value-123456"
    token = "ghp_" + "a1B2" * 9
    result = loop_in_process(project, incident_id, f'repair.command=["agent", "--token", "{secret}", "{token}"]')
    assert result["effective_config"]["max_iterations"] == 3
    assert result["effective_config"]["repair"]["command"][:2] == ["agent", "--token"]
    assert result["effective_config_origins"]["repair.command"] == "test"
    on_disk = Store(project / ".selfheal").read_run_result(incident_id)
    assert on_disk is not None
    for text in (json.dumps(result), json.dumps(on_disk.to_json())):
        assert secret not in text and token not in text


def test_selection_excludes_tdd_tests_unless_configured(tmp_path: Path) -> None:
    plan = Plan.from_json({"incident_id": "incident_20260217_120000_ab12cd", "generated_at": "2026-02-17T12:00:00+00:00",
                           "summary": "s", "root_cause_hypotheses": [], "verification_commands": [], "done_criteria": [],
                           "actions": [{"id": "A1", "title": "t", "priority": "high", "risk": "low", "target_paths": [],
                                        "verification": [], "nodeids": ["t.py::a", "t.py::b"]}]}, "test plan")
    argvs = [["python", "-m", "pytest", "-q", "t.py::a", "t.py::b"]]
    assert selection_nodeids(plan, {}, argvs) == ["t.py::a", "t.py::b"]
    assert _exclude_from_argvs(argvs, ["t.py::b"]) == [["python", "-m", "pytest", "-q", "t.py::a"]]
    # Never turn a selection into the whole suite.
    assert _exclude_from_argvs(argvs, ["t.py::a", "t.py::b"]) == []


def test_a_file_selection_selects_by_file_and_deselects_exclusions() -> None:
    # A command naming test files (by hand, or an older plan's shortened one): the node ids are still selected.
    plan = Plan.from_json({"incident_id": "incident_20260217_120000_ab12cd", "generated_at": "2026-02-17T12:00:00+00:00",
                           "summary": "s", "root_cause_hypotheses": [], "verification_commands": [], "done_criteria": [],
                           "actions": [{"id": "A1", "title": "t", "priority": "high", "risk": "low", "target_paths": [],
                                        "verification": [],
                                        "nodeids": ["tests/t.py::a", "tests/t.py::b", "tests/u.py::c"]}]}, "test plan")
    argvs = [["python", "-m", "pytest", "-q", "tests/t.py"]]
    assert selection_nodeids(plan, {}, argvs) == ["tests/t.py::a", "tests/t.py::b"]
    # An excluded test (TDD, quarantined) inside a selected file is deselected, not run.
    assert _exclude_from_argvs(argvs, ["tests/t.py::b", "tests/u.py::c"]) == [
        ["python", "-m", "pytest", "-q", "tests/t.py", "--deselect", "tests/t.py::b"]
    ]
