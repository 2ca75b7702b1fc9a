"""The loop's records: one iteration recorded (``attempt_XX.json`` + its events) and the close-out of a stop.

Every stop is recorded before it is acted on: the attempt that stops carries its whole
decision, so a resume after a kill anywhere in :func:`finalize` completes the *same* stop
without duplicating files or events. The store lock is held only around these short
read-decide-write steps, so captures of other incidents on the same root proceed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import RefusedError
from pytest_selfheal.history.recording import record_and_triage, run_info
from pytest_selfheal.history.records import AGENT, FAILED, LOOP, PASSED, PASSED_ON_RERUN, TestOutcome
from pytest_selfheal.loop import messages, policy
from pytest_selfheal.loop.control import kill_point
from pytest_selfheal.loop.decision import decide, known_flaky
from pytest_selfheal.loop.regression import RegressionCheck, regression_line
from pytest_selfheal.loop.state import (
    LoopRun,
    has_event,
    minutes_between,
    parse_stamp,
    repeated_failure_event,
    split_runs,
    verification_event,
)
from pytest_selfheal.names import archive_dir, archived_path
from pytest_selfheal.plan.build import build_plan, replan
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.attempt import Attempt, Decision, RepairBlock
from pytest_selfheal.records.incident import CAPTURED_KEYS, Failure
from pytest_selfheal.records.jsondoc import fields_of, freeze
from pytest_selfheal.records.models import FAILING_OUTCOMES, OUTCOME_FAILED, OUTCOME_PASSED
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.redacted import REDACTED
from pytest_selfheal.records.run_result import LoopResult, RunResult
from pytest_selfheal.records.vocab import FinalStatus, IncidentStatus, StopReason, first_few
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import judging
from pytest_selfheal.store.fsio import project_source
from pytest_selfheal.store.reader import INBOX, RUN_RESULT_JSON
from pytest_selfheal.store.root import Store


@dataclass
class IterationOutcome:
    """What :func:`record_iteration` recorded and decided."""

    attempt: Optional[Attempt]  # the attempt_XX.json written (None when a pending stop was completed instead)
    decision: Decision
    status_line: str  # the one parseable line for agents (docs/loop.md "Status line")
    run_result: Optional[LoopResult] = None  # the loop stopped and was closed out
    # What the iteration prints: the failure history's warnings, the status line, then notes.
    lines: list[str] = dataclasses.field(default_factory=list)

    @property
    def closed(self) -> bool:
        return self.run_result is not None


AGENT_MODE = "agent"
# The repair block of an agent-mode run with the code unchanged since the previous one: the
# agent, as the provider, tried nothing (docs/loop.md "An unchanged run is no attempt").
AGENT_UNCHANGED = "nothing changed since the last run (the same diff hash): an iteration with nothing tried"


_NOT_AN_ATTEMPTS = ("target_paths", "root_cause", "triage")
_ATTEMPT_KEYS = tuple(f.key for f in fields_of(Attempt))
_RUN_RESULT_KEYS = tuple(f.key for f in fields_of(LoopResult) if f.key != "repair")  # the repair loop adds it


def _failure_entry(failure: Failure) -> Failure:
    """The failure as an attempt records it: target paths, grouping evidence and triage are the incident's."""
    keys = tuple(k for k in failure.keys or CAPTURED_KEYS if k not in _NOT_AN_ATTEMPTS)
    return dataclasses.replace(failure, target_paths=(), root_cause=None, triage=None, keys=keys)


def ensure_plan(run: LoopRun) -> Plan:
    """The incident's plan, generated if a killed capture left none; ``new → planned``."""
    plan = run.plan
    if plan is None:
        plan = build_plan(run.incident, generated_at=ev.format_ts(), source=project_source(run.incident.rootdir))
        run.write_plan(plan, render_plan_md(plan))
        run.append_event(ev.PLAN_GENERATED, actions=[a.id for a in plan.actions], recovered=True)
    if run.status == IncidentStatus.NEW:
        run.set_status(IncidentStatus.PLANNED)
    return plan


def reopen_incident(store: Store, incident_id: str, *, continue_run: bool = False) -> tuple[str, str, int]:
    """``selfheal reopen`` (:meth:`Store.reopen`), its plan generated first if it was archived
    before it had one. ``continue_run``: its loop run goes on (a code change after a stop)."""
    with store.lock():
        if not store.has_plan(incident_id):  # archived before it had one: only the plan is missing
            ensure_plan(LoopRun.read(store, incident_id))
        return store.reopen(incident_id, continue_run=continue_run)


def start_running(run: LoopRun, **data: Any) -> None:
    """Move the incident to ``running`` through ``planned`` (``data`` goes with the event)."""
    if run.status == IncidentStatus.NEW:
        ensure_plan(run)
    elif run.status == IncidentStatus.PLAN_PROPOSED:
        # Only reachable by hand: a completed replan goes on to planned by itself.
        run.set_status(IncidentStatus.PLANNED, reason="resume")
    if run.status == IncidentStatus.PLANNED:
        run.set_status(IncidentStatus.RUNNING, **data)


def require_inbox(store: Store, incident_id: str) -> None:
    """Refuse (``RefusedError``, exit 5) an incident that is already archived."""
    bucket, _ = store.locate(incident_id)
    if bucket != INBOX:
        raise RefusedError(f"incident {incident_id} is already archived in {archive_dir(bucket)}")


def _record_history(run: LoopRun, observations: Sequence[policy.Observation], failures: Sequence[Failure], *,
                    effective: EffectiveConfig, mode: str, project_root: Path) -> list[str]:
    """Record the attempt just written in the failure history (docs/history.md); the warning,
    if any. A test passing again with no code change is ``passed_on_rerun``, with the
    fingerprint it failed with. Keyed by incident and iteration: never recorded twice."""
    incident_id, incident = run.incident_id, run.incident
    *attempts, written = run.attempts
    iteration = written.iteration
    fingerprints = {f.nodeid or f.test: f.fingerprint for seen in [incident.failures, *(a.failures for a in attempts)]
                    for f in seen if (f.nodeid or f.test) and f.fingerprint}
    current = observations[-1]
    previous = observations[:-1]
    newly_flaky = set(policy.flaky_tests(observations)) - set(policy.flaky_tests(previous))
    failed_before = {n for obs in previous for n, o in obs.outcomes.items() if o in FAILING_OUTCOMES}
    passing = [n for n, o in current.outcomes.items() if o == OUTCOME_PASSED and n in failed_before]
    rerun = [n for n in passing if n in newly_flaky and n in fingerprints]
    tests = [TestOutcome(f.nodeid or f.test, FAILED, f.fingerprint, f.failure_class) for f in failures]
    tests += [TestOutcome(n, PASSED_ON_RERUN, fingerprints[n]) for n in rerun]
    tests += [TestOutcome(n, PASSED) for n in passing if n not in rerun]
    kind = AGENT if mode == "agent" else LOOP
    result = record_and_triage(
        run.store.root, effective.settings.history,
        run_info(run_key=f"{kind}:{incident_id}:{iteration}", kind=kind, project_root=project_root,
                 incident_id=incident_id, iteration=iteration, tests_run=len(current.outcomes)),
        tests, project_root=project_root,
    )
    # The capture (or the job) already said what is wrong with the quarantine file; only a
    # database that cannot be used is worth a line per iteration.
    return [result.unavailable] if result.unavailable else []


def record_iteration(run: LoopRun, *, effective: EffectiveConfig, outcomes: Mapping[str, str],
                     failures: Sequence[Failure], diff_hash: Optional[str], started_at: str, finished_at: str,
                     mode: str, verification_commands: Sequence[str], exit_code: Optional[int],
                     timed_out: bool = False, repair: Optional[RepairBlock] = None,
                     new_failures: Sequence[Failure] = (), project_root: Path,
                     duration_seconds: Optional[float] = None, not_run: Sequence[str] = (),
                     tests_edited: Sequence[str] = (), harness_changed: Sequence[str] = (),
                     regression: Optional[RegressionCheck] = None) -> IterationOutcome:
    """Record one verification as the incident's next attempt, decide, and close if it stops
    (a pending stop is completed instead, nothing new recorded).

    ``failures`` are already redacted. ``not_run``: selected tests this run did not execute
    (agent mode: ``-x``, a subset), whose ``outcomes`` are their last known ones. An
    unchanged agent-mode run is no attempt: the agent is recorded as a provider that found
    no fix, so the second in a row stops ``no_fix_found``. The tests ``regression`` found
    broken join this attempt's outcomes and failures: never a ``success``.
    """
    store, incident_id = run.store, run.incident_id
    selected = len(outcomes)
    if regression is not None:
        outcomes = {**outcomes, **{n: OUTCOME_FAILED for n in regression.broken}}
        failures = [*failures, *regression.failures]
        timed_out = timed_out or regression.timed_out
    pol = policy.LoopPolicy.from_settings(effective.settings)
    with store.lock():
        require_inbox(store, incident_id)
        run.refresh()
        waiting = run.pending()
        if waiting is not None:
            line = messages.status_line(waiting, pol, incident_id=incident_id)
            return IterationOutcome(None, waiting, line, finalize(run, waiting, effective=effective,
                                                                  project_root=project_root), [line])
        incident = run.incident
        previous = run.observations()
        if mode == AGENT_MODE and repair is None and diff_hash is not None and previous[-1].diff_hash == diff_hash:
            repair = RepairBlock("agent", policy.REPAIR_NO_FIX_FOUND, message=AGENT_UNCHANGED)
        edited = list(dict.fromkeys([*tests_edited, *(repair.tests_edited if repair is not None else ())]))
        observation = policy.observed(
            len(previous), dict(outcomes), failures, diff_hash, repair, timed_out=timed_out,
            scope_denied=bool(repair is not None and repair.scope_denied), tests_edited=tuple(edited),
            harness_changed=tuple(harness_changed),
            # An iteration that ran nothing (the code is the one the last run verified) keeps its verdict.
            regressions=(regression.broken if regression is not None
                         else previous[-1].regressions if outcomes and set(outcomes) <= set(not_run) else ()))
        observations = previous + [observation]
        first_start = run.started() or parse_stamp(started_at)
        elapsed = minutes_between(first_start, parse_stamp(finished_at))
        decision = decide(pol, observations, elapsed_minutes=elapsed, known_flaky=known_flaky(incident),
                          unverified=incident.unverified_failures)
        iteration = run.next_iteration
        start_running(run, iteration=iteration)
        if duration_seconds is None:
            duration_seconds = minutes_between(parse_stamp(started_at), parse_stamp(finished_at)) * 60.0
        # Every key is written (null values included) but these, written only when they say something.
        said = {"not_run": bool(not_run), "tests_edited": bool(edited), "harness_changed": bool(observation.harness_changed),
                "regression_tests_run": regression is not None,
                "regressions": regression is not None or bool(observation.regressions)}
        attempt = Attempt(
            incident_id=incident_id, iteration=iteration, started_at=started_at, finished_at=finished_at,
            actions_applied=repair.actions_applied if repair is not None else (),
            verification_commands=tuple(verification_commands), verification_passed=policy.is_success(observation),
            result=decision.action, error_signature=failures[0].signature if failures else None, mode=mode,
            stop_reason=decision.stop_reason, outcomes=observation.outcomes,
            failures=tuple(map(_failure_entry, failures)), new_failures=tuple(map(_failure_entry, new_failures)),
            fingerprint_changed=decision.fingerprint_changed, progress=decision.progress,
            progress_reasons=decision.progress_reasons, tests_fixed=decision.tests_fixed,
            diff_hash=observation.diff_hash, exit_code=exit_code, duration_seconds=round(max(0.0, duration_seconds), 3),
            timed_out=observation.timed_out, repair=repair, scope_denied=observation.scope_denied,
            same_error_repeats=decision.same_error_repeats, decision=decision, tests_edited=tuple(edited),
            harness_changed=observation.harness_changed, regressions=observation.regressions,
            regression_tests_run=regression.ran if regression is not None else None,
            keys=(*(key for key in _ATTEMPT_KEYS if key not in said), *(key for key, ok in said.items() if ok)),
            extra=(("not_run", tuple(not_run)),) if not_run else ())
        run.write_attempt(attempt)
        kill_point("record:after_attempt")
        run.append_event(ev.VERIFICATION_FINISHED, **verification_event(attempt).data)
        kill_point("record:after_verification_event")
        history_warnings = _record_history(run, observations, failures, effective=effective, mode=mode,
                                           project_root=project_root)
        if decision.same_error_repeats >= 2:
            run.append_event(ev.REPEATED_FAILURE_DETECTED, **repeated_failure_event(attempt, decision.same_error_repeats).data)
        line = messages.naming_changes(messages.status_line(decision, pol, incident_id=incident_id),
                                       decision.stop_reason, observation.harness_changed, edited)
        notes = [f"selfheal: incident {incident_id}: nothing changed since the last run: counted as an iteration "
                 "with nothing tried" + ("" if decision.stopped else "; a second such run in a row stops (no_fix_found)")
                 ] if repair is not None and repair.message == AGENT_UNCHANGED else []
        notes += filter(None, [messages.unverified_line(incident_id, observation.outcomes, not_run)])
        if regression is not None:
            notes.append(regression_line(incident_id, decision.tests_fixed, regression))
        if mode == AGENT_MODE and not_run:
            notes.append(f"selfheal: incident {incident_id}: this run ran {selected - len(not_run)} of "
                         f"{selected} selected tests; {len(not_run)} not run (-x, --maxfail or a subset) keep "
                         "their last outcome")
        closed = finalize(run, decision, effective=effective, observations=observations, project_root=project_root) \
            if decision.stopped else None
        return IterationOutcome(attempt, decision, line, closed,
                                [*(f"selfheal: warning: {w}" for w in history_warnings), line, *notes])


def _redact_config(redactor: Any, value: Any) -> Any:
    """Redact a config value; in argv lists (``repair.command``) a word following a flag is
    checked as ``--flag=word`` too, so ``["agent", "--token", "abc123"]`` loses its secret."""
    if isinstance(value, dict):
        return {k: _redact_config(redactor, v) for k, v in value.items()}
    if isinstance(value, list):
        out: list[Any] = []
        for index, item in enumerate(value):
            previous = value[index - 1] if index else None
            if isinstance(item, str) and isinstance(previous, str) and previous.startswith("-") and "=" not in previous:
                joined = f"{previous}={item}"
                if redactor.redact(joined) != joined:
                    out.append(REDACTED)
                    continue
            out.append(_redact_config(redactor, item))
        return out
    return redactor.redact(value) if isinstance(value, str) else value


def build_run_result(incident_id: str, decision: Decision, *, observations: Sequence[policy.Observation],
                     attempts: Sequence[Attempt], pol: policy.LoopPolicy, failure_signature: Optional[str],
                     effective: EffectiveConfig, reopened: Optional[int] = None) -> LoopResult:
    """``run_result.json`` for a stop (pure): deterministic, so a resumed close-out writes the same document."""
    final = policy.final_status_of(decision.stop_reason)
    archived_to = archived_path(str(final), incident_id) if final in (FinalStatus.RESOLVED, FinalStatus.ESCALATED) else None
    proposed = any(attempt.repair is not None and attempt.repair.patch for attempt in attempts)
    this_run = split_runs(attempts, reopened)[1]
    runtime = minutes_between(parse_stamp(this_run[0].started_at), parse_stamp(this_run[-1].finished_at)) \
        if this_run else 0.0
    point = messages.decision_point(decision, observations, pol, incident_id=incident_id,
                                    failure_signature=failure_signature, patch_proposed=proposed)
    return LoopResult(
        incident_id=incident_id, final_status=final, loops_used=decision.iteration, runtime_minutes=round(runtime, 3),
        same_error_repeats=decision.same_error_repeats, archived_to=archived_to,
        stop_reason=StopReason(decision.stop_reason) if decision.stop_reason is not None else None,
        message=decision.message, iteration=attempts[-1].iteration if attempts else 0,
        flaky_tests=tuple(policy.flaky_tests(observations)), tests_fixed=tuple(policy.fixed_tests(observations)),
        fingerprints_per_iteration=tuple(tuple(o.fingerprints) for o in observations), decision_point=point,
        handoff=messages.handoff(observations, decision, incident_id), decision=decision,
        effective_config=freeze(_redact_config(effective.redactor, dict(effective.values))),
        effective_config_origins=freeze(dict(effective.origins)), keys=_RUN_RESULT_KEYS)


def finalize(run: LoopRun, decision: Decision, *, effective: EffectiveConfig,
             observations: Optional[Sequence[policy.Observation]] = None, project_root: Path) -> LoopResult:
    """Close the loop for ``decision`` (a stop): archive it, or replan, or (``cancelled``,
    ``disabled``) only log the stop, leaving the incident open. Idempotent: every step checks
    what is already done, so a resume after a kill completes it without duplicates."""
    reason = str(decision.stop_reason)
    pol = policy.LoopPolicy.from_settings(effective.settings)
    store, incident_id = run.store, run.incident_id
    with store.lock():
        bucket, attempts, incident = run.bucket, run.attempts, run.incident
        if observations is None:
            observations = run.observations()
        last = attempts[-1].iteration if attempts else 0
        result = build_run_result(
            incident_id, decision, observations=observations, attempts=attempts, pol=pol, effective=effective,
            failure_signature=next((a.error_signature for a in reversed(attempts) if a.error_signature),
                                   incident.error_signature or None), reopened=policy.reopened_after(incident))
        point = result.decision_point.to_json() if result.decision_point is not None else None
        stop_data = {"iteration": last, "stop_reason": reason}
        if reason in (StopReason.CANCELLED, StopReason.DISABLED):
            run.append_event(ev.DECISION_POINT_NEEDED, **stop_data, decision_point=point)
            run.append_event(ev.LOOP_STOPPED, **stop_data, final_status=None, loop_iteration=decision.iteration,
                             message=decision.message)
            return result
        existing = run.run_result
        if bucket != INBOX:
            # Archived already: the close-out completed (the archive is its last step).
            return LoopResult.from_json(existing.to_json(), RUN_RESULT_JSON) if existing is not None else result
        if existing is None or existing.iteration != last or existing.stop_reason != reason:
            run.write_run_result(RunResult.from_json(result.to_json(), RUN_RESULT_JSON))
        kill_point("finalize:after_run_result")
        # What the stop named: the harness changed, or the tests edited.
        named = (attempts[-1].harness_changed or attempts[-1].tests_edited) if attempts else ()
        judging.remember_stop(project_root, judging.RememberedStop(
            incident_id, reason, first_few(named) if named else decision.message or "", last,
            pol.max_iterations, tuple(attempts[-1].outcomes) if attempts else ()))
        records = ev.since_last(run.events)
        if not has_event(records, ev.DECISION_POINT_NEEDED, **stop_data):
            run.append_event(ev.DECISION_POINT_NEEDED, **stop_data, decision_point=point)
        kill_point("finalize:after_decision_point")
        if not has_event(records, ev.LOOP_STOPPED, **stop_data):
            run.append_event(ev.LOOP_STOPPED, **stop_data, final_status=result.final_status,
                             archived_to=result.archived_to, loop_iteration=decision.iteration,
                             flaky_tests=list(result.flaky_tests), tests_fixed=list(result.tests_fixed),
                             message=decision.message)
        kill_point("finalize:after_loop_stopped")
        if reason == StopReason.REPLAN_REQUESTED:
            _replan(run, last)
        else:
            kill_point("finalize:before_archive")
            run.archive(str(result.final_status))
        return result


def _replan(run: LoopRun, last: int) -> None:
    """running → plan_proposed → (plan regenerated) → planned, each step skipped when done."""
    if run.status == IncidentStatus.RUNNING:
        run.set_status(IncidentStatus.PLAN_PROPOSED, reason="replan_requested", iteration=last)
    kill_point("finalize:after_plan_proposed")
    if run.status != IncidentStatus.PLAN_PROPOSED:
        return  # planned already: the replan completed before a kill
    plan = run.require_plan()
    if plan.replanned_at_iteration != last:
        run_attempts = [*split_runs(run.attempts[:-1], run.reopened)[1], *run.attempts[-1:]]
        plan = dataclasses.replace(replan(plan, run_attempts, generated_at=ev.format_ts()), replanned_at_iteration=last)
        run.write_plan(plan, render_plan_md(plan))
    kill_point("finalize:after_replan_written")
    if not has_event(run.events, ev.PLAN_GENERATED, replanned_at_iteration=last):
        run.append_event(ev.PLAN_GENERATED, replan=True, revision=plan.revision, replanned_at_iteration=last,
                         actions=[a.id for a in plan.actions])
    run.set_status(IncidentStatus.PLANNED, reason="replan", iteration=last)
