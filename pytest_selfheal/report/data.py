"""The ``## RALF Lite Loop Report`` data: the report of incidents' records (pure).

Every field and rule is documented in docs/report.md; keep the two in step. Deterministic
(no timestamps but those in the data), so golden files stay stable.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

from pytest_selfheal.config.keys import DEFAULT_ORIGIN, GROUPS, ROOT_KEY, SCHEMA, nest, strip_root
from pytest_selfheal.errors import InputError
from pytest_selfheal.history.triage import RERUN_DETAIL, TRIAGE_LABELS
from pytest_selfheal.loop import messages, policy
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.jsondoc import JsonRecord, every_key, plain_json
from pytest_selfheal.records.models import TOOLING_ENV
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.report import NewFailure, Report, ReportIncident, ReportIteration, ReportTask, TriageEntry
from pytest_selfheal.records.run_result import Handoff, RunResult
from pytest_selfheal.records.tolerant import strs, unique
from pytest_selfheal.records.vocab import StopReason, TriageLabel
from pytest_selfheal.report.outcome import assemble_report

INBOX = "inbox"
# Origin of config values taken from a run_result.json when no effective config was given.
RUN_RESULT_ORIGIN = "run_result.json"


@dataclass(frozen=True)
class IncidentRun:
    """One incident's records, the input of :func:`build_report`; ``incident.status`` is ``status.txt``'s."""

    incident: Incident
    plan: Optional[Plan] = None
    attempts: Sequence[Attempt] = ()
    run_result: Optional[RunResult] = None
    bucket: str = INBOX


def _unwrap_config(config: Mapping[str, object]) -> Mapping[str, object]:
    # Accept both the bare ralf_lite mapping and the files' {"ralf_lite": {...}} form.
    inner = config.get(ROOT_KEY)
    if len(config) == 1 and isinstance(inner, Mapping):
        return inner
    return config


def flatten_config(config: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key in sorted(config, key=str):
        value = config[key]
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, dotted))
        else:
            flat[dotted] = value
    return flat


def _resolve_config(
    effective_config: Optional[Mapping[str, object]],
    origins: Optional[Mapping[str, str]],
    runs: Sequence[IncidentRun],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The report's config (defaults filled in) and each leaf's origin."""
    given, given_origin = effective_config, DEFAULT_ORIGIN
    if given is None:
        recorded = [run.run_result.effective_config for run in runs
                    if run.run_result is not None and _recorded(run.run_result, "effective_config")]
        given, given_origin = (plain_json(recorded[0]), RUN_RESULT_ORIGIN) if recorded else ({}, DEFAULT_ORIGIN)
    # An empty group sets no key: the defaults' keys under it stay.
    flat = {k: v for k, v in flatten_config(_unwrap_config(given)).items() if v != {} or k not in GROUPS}
    values = {**{spec.key: spec.default for spec in SCHEMA}, **flat}
    named = {strip_root(str(k)): str(v) for k, v in (origins or {}).items()}
    resolved = {key: named.get(key, given_origin if key in flat else DEFAULT_ORIGIN) for key in sorted(values)}
    return copy.deepcopy(nest(values)), resolved


def _recorded(record: JsonRecord, key: str) -> bool:
    # A record built in code has every field.
    return record.keys is None or key in record.keys


# The fields an iteration and a task copy from their attempt and plan action, as recorded.
_ITERATION_FIELDS = ("iteration", "mode", "started_at", "finished_at", "result", "stop_reason", "verification_passed",
                     "error_signature", "fingerprint_changed", "progress", "progress_reasons", "diff_hash")
_TASK_FIELDS = ("title", "nodeids", "fingerprint", "fingerprints", "signature", "failure_type", "where", "also_where")
_INCIDENT_FIELDS = ("created_at", "step", "failure_class", "error_signature", "unverified_failures")
_RUN_RESULT_FIELDS = ("same_error_repeats", "runtime_minutes", "archived_to", "decision_point")
_NEW_FAILURE_FIELDS = ("fingerprint", "signature", "failure_type")  # each only when the failure recorded it


def _iteration_entry(attempt: Attempt) -> ReportIteration:
    # A test this iteration did not run (agent mode with -x) carries its last outcome in the
    # attempt; the report counts only the tests that ran.
    not_run = set(strs(attempt.get_extra("not_run")))
    repair = attempt.repair
    return ReportIteration(
        **{name: getattr(attempt, name) for name in _ITERATION_FIELDS},
        outcomes={k: v for k, v in sorted(attempt.outcomes.items()) if k not in not_run},
        fingerprints=tuple(f.fingerprint for f in attempt.failures if f.fingerprint),
        repair_result=repair.result if repair is not None and _recorded(repair, "result") else None,
        timed_out=attempt.timed_out is True,
    )


def _task_progress(nodeids: Sequence[str], iterations: Sequence[ReportIteration]) -> tuple[int, Optional[int]]:
    """``(attempts, index of the iteration it passed at, or None)`` of one plan action."""
    latest: dict[str, str] = {}
    count = 0
    for index, iteration in enumerate(iterations):
        outcomes = iteration.outcomes
        if nodeids and outcomes:
            touched = [n for n in nodeids if n in outcomes]
            if not touched:
                continue
            count += 1
            latest.update({n: outcomes[n] for n in touched})
            if all(latest.get(n) == "passed" for n in nodeids):
                return count, index
        else:
            count += 1
            if iteration.verification_passed:
                return count, index
    return count, None


def _observations(run: IncidentRun) -> list[policy.Observation]:
    try:
        capture = policy.capture_observation(run.incident)
        return [capture] + [policy.observation_from_attempt(a) for a in run.attempts]
    except (InputError, ValueError, TypeError, KeyError, AttributeError):
        return []


REPAIR_CALLS_SHOWN = 5  # the last repair calls the report names (all are counted)


def _regression_check(attempts: Sequence[Attempt]) -> Optional[dict[str, object]]:
    checked = [a for a in attempts if a.regression_tests_run is not None]
    if not checked:
        return None
    return {"tests_run": checked[-1].regression_tests_run, "broken": list(checked[-1].regressions)}


def _repair_summary(attempts: Sequence[Attempt], rr: Optional[RunResult]) -> Optional[dict[str, object]]:
    """What the repair did (each call, then the end), or None when no provider ran."""
    calls = [a for a in attempts if a.repair is not None and a.repair.provider]
    block = rr.repair if rr is not None else None
    if not calls and block is None:
        return None
    lines = [f"iteration {a.iteration}: {a.repair.provider} — {messages.repair_line(a.repair)}"
             for a in calls[-REPAIR_CALLS_SHOWN:] if a.repair is not None]
    if len(calls) > REPAIR_CALLS_SHOWN:
        lines.insert(0, f"{len(calls)} repair calls, the last {REPAIR_CALLS_SHOWN}:")
    if block is None:
        return {"provider_calls": len(calls), "final_patch": None, "applied": False, "applied_to": None,
                "files_changed": [], "summary": lines}
    named = block.final_patch and not all(f in block.message for f in block.files_changed)
    files = f" ({', '.join(block.files_changed)})" if block.files_changed and named else ""
    lines.append(f"{block.final_patch or 'patch'}: {block.message or 'no change was proposed'}{files}")
    return {"provider_calls": block.provider_calls, "final_patch": block.final_patch, "applied": bool(block.applied),
            "applied_to": block.applied_to, "files_changed": list(block.files_changed), "summary": lines}


def _next_action(incident_id: str, stop_reason: Optional[str], finished: bool, looped: bool, has_plan: bool,
                 tooling: bool = False) -> str:
    if not finished:
        if looped:
            return f"Continue the loop: selfheal loop {incident_id}"
        if tooling:
            # The loop would stop at once with tooling_env: the environment, not the code, is broken.
            return (f"Fix the environment (a TOOLING_ENV failure is not code-fixable; selfheal show {incident_id}), "
                    "then run pytest --selfheal again")
        if not has_plan:
            return f"Run the loop (it generates the missing plan first): selfheal loop {incident_id}"
        return f"Run the loop: selfheal loop {incident_id} (or fix the code and run pytest --selfheal again)"
    try:
        return messages.recommended_next_action(stop_reason, incident_id)
    except ValueError:  # a stop reason this version does not know
        return f"Investigate manually: selfheal show {incident_id}"


def _failure_id(failure: Failure) -> Optional[str]:
    return failure.nodeid or failure.test or None


def _incident_entry(run: IncidentRun) -> ReportIncident:
    incident = run.incident
    incident_id = incident.incident_id
    status = incident.status or "new"
    attempts = sorted(run.attempts, key=lambda a: a.iteration)
    iterations = [_iteration_entry(a) for a in attempts]
    rr = run.run_result
    last = iterations[-1] if iterations else None
    stopped_attempt = last is not None and last.result == policy.ACTION_STOP
    if policy.stop_is_history(policy.stop_history_after(incident), (last.iteration or 0) if last else 0, status):
        rr, stopped_attempt = None, False  # reopened (selfheal reopen) and not stopped since
    finished = rr is not None or stopped_attempt
    stop_reason: Optional[str] = rr.stop_reason if rr is not None else None
    if stop_reason is None and stopped_attempt and last is not None:
        stop_reason = last.stop_reason
    final_status = rr.final_status if rr is not None else status
    loops_used = rr.loops_used if rr is not None else len(iterations)

    failures = incident.failures
    capture_fps = tuple(f.fingerprint for f in failures if f.fingerprint)
    fingerprints_per_iteration = (capture_fps,) + tuple(i.fingerprints for i in iterations)

    # The loop's own verdicts when recorded; else the same rules over the recorded observations.
    has_flaky = rr is not None and _recorded(rr, "flaky_tests")
    has_fixed = rr is not None and _recorded(rr, "tests_fixed")
    observations = _observations(run) if not (has_flaky and has_fixed) else []
    flaky = list(rr.flaky_tests) if rr is not None and has_flaky else policy.flaky_tests(observations)
    fixed = list(rr.tests_fixed) if rr is not None and has_fixed else policy.fixed_tests(observations)
    # A test that passed on re-run with no code change was not fixed: it is flaky.
    tests_fixed = [t for t in unique(fixed) if t not in flaky]
    # And so is one the captured run itself saw pass on a re-run (a re-run plugin).
    flaky += [nodeid for f in incident.passed_on_rerun if (nodeid := _failure_id(f))]

    tasks: list[ReportTask] = []
    for action in run.plan.actions if run.plan is not None else ():
        nodeids = action.nodeids
        count, passed_at = _task_progress(nodeids, iterations)
        passed = passed_at is not None
        if passed and finished and stop_reason and passed_at == len(iterations) - 1:
            # Passed at the iteration the loop stopped on: that stop's verdict is the task's too
            # (a green selection that stopped unverified_failures or tests_edited is no success).
            task_stop: Optional[str] = stop_reason
        elif passed:
            task_stop = StopReason.SUCCESS
        elif finished and (count > 0 or loops_used == 0):
            task_stop = stop_reason  # the loop stopped while this action was still failing
        else:
            task_stop = None  # not run (yet), or never verified by the loop
        tasks.append(ReportTask(
            **{name: getattr(action, name) for name in _TASK_FIELDS},
            task=action.id or f"A{len(tasks) + 1}",
            attempts=count,
            stop_reason=task_stop,
            passed=passed,
            flaky=bool(nodeids) and passed and all(n in flaky for n in nodeids),
        ))

    new_failures: dict[tuple[str, str], NewFailure] = {}  # each failure once, at its first iteration
    for attempt in attempts:
        for failure in attempt.new_failures:
            identity: dict[str, Any] = {name: getattr(failure, name) if _recorded(failure, name) else None
                                        for name in _NEW_FAILURE_FIELDS}
            new_failures.setdefault((_failure_id(failure) or "", failure.fingerprint), NewFailure(
                **identity, nodeid=_failure_id(failure), iteration=attempt.iteration))

    tooling = any(f.failure_type == TOOLING_ENV for f in failures)
    recommended = _next_action(incident_id, stop_reason, finished, bool(iterations), run.plan is not None, tooling)
    if rr is not None and rr.handoff is not None:
        handoff = rr.handoff.to_json()  # the loop's handoff, copied as recorded
        if isinstance(handoff.get("recommended_next_action"), str):
            recommended = handoff["recommended_next_action"]
    else:  # the handoff the loop writes, of this entry's values
        handoff = Handoff(iterations=len(iterations), fingerprints_per_iteration=fingerprints_per_iteration,
                          fixed=tuple(tests_fixed), flaky_tests=tuple(flaky),
                          keys=every_key(Handoff, "stop_reason", "recommended_next_action")).to_json()
    # A repair that applied or proposed a fix changes what a person does next.
    after_repair = messages.next_action_after_repair(stop_reason, incident_id, rr.repair) if rr is not None else None
    handoff["recommended_next_action"] = after_repair or recommended
    has_config = rr is not None and _recorded(rr, "effective_config")

    recorded: dict[str, Any] = {name: getattr(rr, name, None) for name in _RUN_RESULT_FIELDS}  # None without one
    return ReportIncident(
        **{name: getattr(incident, name) for name in _INCIDENT_FIELDS},
        **recorded,
        incident_id=incident_id,
        status=status,
        bucket=run.bucket,
        capture_tests=tuple(unique(n for n in (_failure_id(f) for f in failures) if n)),
        plan_revision=(run.plan.revision or 1) if run.plan is not None else None,
        finished=finished,
        final_status=final_status,
        stop_reason=stop_reason,
        loops_used=loops_used,
        run_config=_unwrap_config(plain_json(rr.effective_config)) if rr is not None and has_config else None,
        tasks=tuple(tasks),
        iterations=tuple(iterations),
        fingerprints_per_iteration=fingerprints_per_iteration,
        tests_fixed=tuple(tests_fixed),
        flaky_tests=tuple(unique(flaky)),
        # Test files the verified code differs in (repair.allow_test_edits): shown first.
        tests_edited=attempts[-1].tests_edited if attempts else (),
        new_failures=tuple(new_failures.values()),
        triage=tuple(report_triage([*failures, *incident.passed_on_rerun], flaky)),
        handoff=handoff,
        repair=_repair_summary(attempts, rr),
        regression_check=_regression_check(attempts),
    )


def build_report(
    *,
    incidents: Sequence[IncidentRun],
    effective_config: Optional[Mapping[str, object]] = None,
    origins: Optional[Mapping[str, str]] = None,
    enabled: bool = True,
) -> Report:
    """The report of ``incidents``, sorted by ``created_at`` then id, a repeated id kept once."""
    values, resolved = _resolve_config(effective_config, origins, incidents)
    first: dict[str, IncidentRun] = {}
    for run in incidents:
        first.setdefault(run.incident.incident_id, run)
    runs = sorted(first.values(), key=lambda r: (r.incident.created_at, r.incident.incident_id))
    return assemble_report(enabled=bool(enabled) and values.get("enabled") is not False, effective_config=values,
                           origins=resolved, incidents=[_incident_entry(run) for run in runs])


def report_triage(failures: Sequence[Failure], flaky: Collection[str]) -> list[TriageEntry]:
    """Each failure's recorded triage, ``flaky`` when the loop saw it pass on a re-run (a quarantine wins)."""
    entries: list[TriageEntry] = []
    for failure in failures:
        recorded = failure.triage
        if recorded is None or recorded.label not in TRIAGE_LABELS:
            continue
        nodeid = failure.nodeid or failure.test
        if nodeid in flaky and recorded.label != TriageLabel.QUARANTINED:
            recorded = replace(recorded, label=TriageLabel.FLAKY, detail=RERUN_DETAIL)
        entries.append(TriageEntry(nodeid, failure.fingerprint, failure.failure_type, recorded))
    return entries
