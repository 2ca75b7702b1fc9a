"""The RALF-Lite loop driver: iterations, attempts, close-out, resume, cancel (docs/loop.md).

One iteration = *(repair) → verify → observe → record → decide*. The decision itself is
:func:`policy.decide` (pure); this module runs the verification selections
(:mod:`verify`), records ``attempt_XX.json`` and the events, and closes the loop
(``run_result.json``, status, archive) — all of it resumable:

- **Disk is the truth.** Observations are rebuilt from ``incident.json`` and the
  attempts on disk at every step; an attempt is never re-run or written twice
  (``Store.write_attempt`` refuses to overwrite). An iteration killed before its attempt
  was written was never recorded and simply runs again.
- **Every stop is recorded before it is acted on**: the attempt that stops carries
  ``result: "stop"`` and its whole decision, so a resume after a kill anywhere in
  :func:`finalize` completes the *same* stop (not a re-decision under a different config)
  without duplicating files or events.
- **Two locks**: a per-incident loop lock (``error_runs/<id>/.loop.lock``, taken without
  waiting) keeps two loops of one incident from interleaving for the whole run, while the
  store lock is only held around short read-decide-write steps, so captures of other
  incidents on the same root proceed.

Used by ``selfheal loop`` (commands/loop.py), by ``pytest --selfheal --selfheal-loop``
and — through :func:`record_iteration` — by the plugin's agent-in-the-loop mode.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal.analysis.classify import rules_for_run
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import Cancelled, InputError, NotFoundError, RefusedError, StoreIOError
from pytest_selfheal.gitrepo import clean_tree_hash, diff_hash
from pytest_selfheal.loop import policy
from pytest_selfheal.loop.verify import COLLECTION_KEY, check_allowed, observe, run_selection
from pytest_selfheal.plan.build import build_plan, render_plan_md, replan, verification_argv
from pytest_selfheal.records.models import Failure
from pytest_selfheal.redact import REDACTED, default_redactor
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store
from pytest_selfheal.store.states import NEW, PLAN_PROPOSED, PLANNED, RUNNING

INBOX = "inbox"
LOOP_LOCK_FILE = ".loop.lock"

# Test-only crash hook (tests/test_crash_safety.py): when this environment variable names
# a step, the process SIGKILLs itself there. Never set it outside tests.
KILL_ENV = "SELFHEAL_TEST_KILL_AT"
KILL_STEPS: Tuple[str, ...] = (
    "loop:after_running",
    "iteration:before_verify",
    "iteration:after_verify",
    "record:after_attempt",
    "record:after_verification_event",
    "finalize:after_run_result",
    "finalize:after_decision_point",
    "finalize:after_loop_stopped",
    "finalize:after_plan_proposed",
    "finalize:after_replan_written",
    "finalize:before_archive",
)

# A provider callable (issue 5's seam), called before each verification of a run:
# provider(incident_id=..., iteration=..., store=..., plan=..., last_attempt=...,
#          observations=...) -> None (no repair) | repair dict (see docs/loop.md).
Provider = Callable[..., Optional[Dict[str, Any]]]


def _kill_point(step: str) -> None:
    """Test-only: SIGKILL this process at ``step`` when ``SELFHEAL_TEST_KILL_AT`` names it."""
    if os.environ.get(KILL_ENV) == step:  # pragma: no cover - the process dies here
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


# --------------------------------------------------------------------------- time


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _stamp(moment: datetime) -> str:
    return ev.format_ts(moment, "milliseconds")


def _parse_stamp(text: Any) -> Optional[datetime]:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _minutes(start: Optional[datetime], end: Optional[datetime]) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds() / 60.0)


# --------------------------------------------------------------------------- observations


@dataclass
class IterationOutcome:
    """What :func:`record_iteration` recorded and decided."""

    attempt: Dict[str, Any]  # the attempt_XX.json written ({} when a pending stop was completed instead)
    decision: policy.Decision
    closed: bool  # the loop stopped and was closed out (run_result written, archived/replanned)
    status_line: str  # the one parseable line for agents (docs/loop.md "Status line")
    run_result: Optional[Dict[str, Any]] = None  # when closed


def split_runs(attempts: Sequence[Mapping[str, Any]]) -> Tuple[Optional[Mapping[str, Any]], List[Mapping[str, Any]]]:
    """``(baseline attempt or None, attempts of the current loop run)``.

    A ``replan_requested`` stop ends a loop run: the next run (on the regenerated plan)
    starts afresh — its own iteration budget, repeat and no-progress counters — with the
    last attempt of the previous run as its baseline (observation 0) instead of the capture.
    """
    boundary = -1
    for index, attempt in enumerate(attempts):
        if attempt.get("result") == policy.ACTION_STOP and attempt.get("stop_reason") == policy.REPLAN_REQUESTED:
            boundary = index
    if boundary < 0:
        return None, list(attempts)
    return attempts[boundary], list(attempts[boundary + 1:])


def capture_diff_hash(incident: Mapping[str, Any], context: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The working-tree diff hash at capture time, or None when unknown.

    ``incident.json``'s ``diff_hash`` when the capture recorded it; otherwise, when
    ``context.json`` says the tree was clean at a known commit, the hash of a clean tree
    at that commit (gitrepo.clean_tree_hash); otherwise unknown.
    """
    value = incident.get("diff_hash")
    if isinstance(value, str) and value:
        return value
    git_info = (context or {}).get("git")
    if isinstance(git_info, Mapping) and git_info.get("dirty") is False and isinstance(git_info.get("commit"), str):
        return clean_tree_hash(str(git_info["commit"]))
    return None


def observations_from_disk(
    incident: Mapping[str, Any],
    attempts: Sequence[Mapping[str, Any]],
    *,
    capture_hash: Optional[str] = None,
) -> List[policy.Observation]:
    """The observations of the current loop run: observation 0, then one per attempt.

    Observation 0 is the capture (the incident's failures, ``capture_hash`` as its diff
    hash — default: ``incident.json``'s ``diff_hash``) for the first run, or the last
    attempt of the previous run after a ``replan_requested`` stop (see :func:`split_runs`).
    """
    baseline, run = split_runs(attempts)
    if baseline is None:
        diff = capture_hash if capture_hash is not None else capture_diff_hash(incident)
        first = policy.capture_observation(incident, diff_hash=diff)
    else:
        first = dataclasses.replace(policy.observation_from_attempt(baseline), iteration=0)
    return [first] + [policy.observation_from_attempt(a) for a in run]


def _run_started(attempts: Sequence[Mapping[str, Any]]) -> Optional[datetime]:
    _, run = split_runs(attempts)
    return _parse_stamp(run[0].get("started_at")) if run else None


def _decision_from_dict(data: Mapping[str, Any], fallback_reason: Optional[str] = None) -> policy.Decision:
    """Rebuild a recorded :class:`policy.Decision` (``Decision.to_dict()`` form)."""
    reason = data.get("stop_reason", fallback_reason)
    action = data.get("action") or (policy.ACTION_STOP if reason else policy.ACTION_CONTINUE)
    progress = policy.Progress(
        bool(data.get("progress", False)),
        tuple(str(r) for r in data.get("progress_reasons") or ()),
        bool(data.get("fingerprint_changed", False)),
        tuple(str(t) for t in data.get("tests_fixed") or ()),
    )

    def _int(key: str) -> int:
        value = data.get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return policy.Decision(
        action=str(action),
        stop_reason=reason if isinstance(reason, str) else None,
        final_status=data.get("final_status") if isinstance(data.get("final_status"), str) else final_status_of(reason),
        progress=progress,
        same_error_repeats=_int("same_error_repeats"),
        no_progress_streak=_int("no_progress_streak"),
        retry_timeout=bool(data.get("retry_timeout", False)),
        message=str(data.get("message") or f"Stopped: {reason}."),
        iteration=_int("iteration"),
        conditions=tuple(str(c) for c in data.get("conditions") or ((reason,) if reason else ())),
    )


def final_status_of(stop_reason: Optional[str]) -> Optional[str]:
    """resolved / escalated / replan_requested for a stop reason; None when the incident stays open."""
    if stop_reason is None or stop_reason in (policy.CANCELLED, policy.DISABLED):
        return None
    if stop_reason == policy.SUCCESS:
        return policy.FINAL_RESOLVED
    if stop_reason == policy.REPLAN_REQUESTED:
        return policy.FINAL_REPLAN_REQUESTED
    return policy.FINAL_ESCALATED


def pending_stop(
    attempts: Sequence[Mapping[str, Any]],
    run_result: Optional[Mapping[str, Any]],
    status: str,
    replanned_at: Optional[int] = None,
) -> Optional[policy.Decision]:
    """A recorded stop whose close-out has not completed, or None.

    The most recent record wins: ``run_result.json`` when it belongs to the latest attempt
    (its ``iteration`` equals the last attempt number, 0 when there is none), else the last
    attempt when it says ``stop``. A ``replan_requested`` stop is complete once the status
    is back to ``planned``, or the plan says it was regenerated for this stop
    (``replanned_at``: the plan's ``replanned_at_iteration``) and a new run has moved the
    status on; a resolved/escalated stop is complete once archived (callers only ask for
    inbox incidents).
    """
    last = int(attempts[-1]["iteration"]) if attempts else 0
    source: Optional[Mapping[str, Any]] = None
    if run_result is not None and run_result.get("iteration") == last and run_result.get("stop_reason"):
        recorded = run_result.get("decision")
        source = recorded if isinstance(recorded, Mapping) else {"stop_reason": run_result.get("stop_reason")}
    elif attempts and attempts[-1].get("result") == policy.ACTION_STOP:
        recorded = attempts[-1].get("decision")
        source = recorded if isinstance(recorded, Mapping) else {"stop_reason": attempts[-1].get("stop_reason")}
    if source is None or not source.get("stop_reason"):
        return None
    decision = _decision_from_dict(source)
    if decision.stop_reason == policy.REPLAN_REQUESTED and (
        status == PLANNED or (replanned_at == last and status != PLAN_PROPOSED)
    ):
        return None
    return decision


def _pending(store: "Store", incident_id: str, attempts: Sequence[Mapping[str, Any]]) -> Optional[policy.Decision]:
    """:func:`pending_stop` from the files of ``incident_id`` (call under the store lock)."""
    replanned_at: Optional[int] = None
    if store.has_plan(incident_id):
        value = store.read_plan(incident_id).get("replanned_at_iteration")
        replanned_at = value if isinstance(value, int) and not isinstance(value, bool) else None
    return pending_stop(attempts, store.read_run_result(incident_id), store.read_status(incident_id), replanned_at)


# --------------------------------------------------------------------------- status line


def agent_status_line(incident_id: str, decision: policy.Decision, iteration: int, max_iterations: int) -> str:
    """ONE parseable line for agents and humans (grammar in docs/loop.md "Status line").

    ``selfheal: incident <id> iteration <k> of <N>: fingerprint same|changed, progress
    yes|no -> CONTINUE`` or ``... -> STOP <stop_reason>``.
    """
    shown = dataclasses.replace(decision, iteration=iteration)
    return policy.status_line(shown, policy.LoopPolicy(max_iterations=max_iterations), incident_id=incident_id)


# --------------------------------------------------------------------------- records


def _failure_record(failure: Failure) -> Dict[str, Any]:
    data = failure.to_dict()
    data.pop("target_paths", None)
    return data


def _recorded_decision(attempt: Mapping[str, Any]) -> Mapping[str, Any]:
    recorded = attempt.get("decision")
    return recorded if isinstance(recorded, Mapping) else {}


def _event_from_attempt(attempt: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``verification_finished`` data: enough to replay the loop from events alone."""
    failures = attempt.get("failures") or []
    repair = attempt.get("repair")
    decision = _recorded_decision(attempt)
    return {
        "iteration": attempt["iteration"],
        "loop_iteration": decision.get("iteration"),
        "mode": attempt.get("mode"),
        "verification_passed": attempt["verification_passed"],
        "result": attempt["result"],
        "stop_reason": attempt.get("stop_reason"),
        "outcomes": attempt.get("outcomes") or {},
        "fingerprints": [f.get("fingerprint") for f in failures],
        "failure_types": [f.get("failure_type") for f in failures],
        "error_signature": attempt.get("error_signature"),
        "diff_hash": attempt.get("diff_hash"),
        "timed_out": bool(attempt.get("timed_out", False)),
        "repair_result": repair.get("result") if isinstance(repair, Mapping) else None,
        "scope_denied": bool(attempt.get("scope_denied", False)),
        "progress": attempt.get("progress"),
        "progress_reasons": attempt.get("progress_reasons") or [],
        "fingerprint_changed": attempt.get("fingerprint_changed"),
        "same_error_repeats": decision.get("same_error_repeats"),
        "no_progress_streak": decision.get("no_progress_streak"),
        "exit_code": attempt.get("exit_code"),
    }


def _has_event(records: Sequence[Mapping[str, Any]], name: str, **match: Any) -> bool:
    return any(r.get("event") == name and all(r.get(k) == v for k, v in match.items()) for r in records)


def _replayed_status(records: Sequence[Mapping[str, Any]]) -> Optional[str]:
    status: Optional[str] = None
    for record in records:
        if record.get("event") == ev.INCIDENT_CAPTURED:
            status = str(record.get("status") or NEW)
        elif record.get("event") == ev.STATUS_CHANGED and isinstance(record.get("to"), str):
            status = str(record["to"])
    return status


def recover_events(store: "Store", incident_id: str, attempts: Sequence[Mapping[str, Any]]) -> int:
    """Append the events a kill may have lost; returns how many were added. Call under the store lock.

    A kill between ``attempt_XX.json`` and its ``verification_finished`` (or
    ``repeated_failure_detected``) line, or between ``status.txt`` and its
    ``status_changed`` line, would leave the event log behind the files; the missing
    records are appended (marked ``recovered: true``) so ``selfheal replay`` equals the disk.
    """
    records, _ = store.read_events(incident_id)
    added = 0
    for attempt in attempts:
        iteration = attempt["iteration"]
        if not _has_event(records, ev.VERIFICATION_FINISHED, iteration=iteration):
            store.append_event(incident_id, ev.VERIFICATION_FINISHED, recovered=True, **_event_from_attempt(attempt))
            added += 1
        repeats = _recorded_decision(attempt).get("same_error_repeats")
        if isinstance(repeats, int) and repeats >= 2 and not _has_event(
            records, ev.REPEATED_FAILURE_DETECTED, iteration=iteration
        ):
            store.append_event(
                incident_id,
                ev.REPEATED_FAILURE_DETECTED,
                recovered=True,
                **_repeated_data(attempt, repeats),
            )
            added += 1
    actual = store.read_status(incident_id)
    logged = _replayed_status(records)
    if logged is not None and logged != actual:
        store.append_event(incident_id, ev.STATUS_CHANGED, **{"from": logged, "to": actual, "recovered": True})
        added += 1
    return added


def _repeated_data(attempt: Mapping[str, Any], repeats: int) -> Dict[str, Any]:
    failures = attempt.get("failures") or []
    return {
        "iteration": attempt["iteration"],
        "fingerprints": sorted({str(f.get("fingerprint")) for f in failures}),
        "error_signature": attempt.get("error_signature"),
        "same_error_repeats": repeats,
    }


def _attempt_document(
    incident_id: str,
    iteration: int,
    *,
    observation: policy.Observation,
    decision: policy.Decision,
    failures: Sequence[Failure],
    new_failures: Sequence[Failure],
    started_at: str,
    finished_at: str,
    mode: str,
    verification_commands: Sequence[str],
    exit_code: Optional[int],
    duration_seconds: Optional[float],
    repair: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    if duration_seconds is None:
        start, end = _parse_stamp(started_at), _parse_stamp(finished_at)
        duration_seconds = _minutes(start, end) * 60.0
    repair_doc = dict(repair) if repair is not None else None
    actions = repair_doc.get("actions_applied") if repair_doc else None
    return {
        "incident_id": incident_id,
        "iteration": iteration,
        "started_at": started_at,
        "finished_at": finished_at,
        "actions_applied": [str(a) for a in actions] if isinstance(actions, list) else [],
        "verification_commands": list(verification_commands),
        "verification_passed": policy.is_success(observation),
        "result": decision.action,
        "error_signature": failures[0].signature if failures else None,
        "mode": mode,
        "stop_reason": decision.stop_reason,
        "outcomes": dict(observation.outcomes),
        "failures": [_failure_record(f) for f in failures],
        "new_failures": [_failure_record(f) for f in new_failures],
        "fingerprint_changed": decision.progress.fingerprint_changed,
        "progress": decision.progress.progress,
        "progress_reasons": list(decision.progress.reasons),
        "tests_fixed": list(decision.progress.tests_fixed),
        "diff_hash": observation.diff_hash,
        "exit_code": exit_code,
        "duration_seconds": round(max(0.0, duration_seconds), 3),
        "timed_out": observation.timed_out,
        "repair": repair_doc,
        "scope_denied": observation.scope_denied,
        "same_error_repeats": decision.same_error_repeats,
        "decision": decision.to_dict(),
    }


# --------------------------------------------------------------------------- plan + status


def ensure_plan(store: "Store", incident_id: str) -> Dict[str, Any]:
    """The incident's plan, generated if missing (a capture killed before writing it);
    moves ``new → planned``. Call under the store lock."""
    if not store.has_plan(incident_id):
        plan = build_plan(store.read_incident(incident_id), generated_at=ev.format_ts())
        store.write_plan(incident_id, plan, render_plan_md(plan))
        store.append_event(incident_id, ev.PLAN_GENERATED, actions=[a["id"] for a in plan["actions"]], recovered=True)
    if store.read_status(incident_id) == NEW:
        store.set_status(incident_id, PLANNED)
    return store.read_plan(incident_id)


def _start_running(store: "Store", incident_id: str, **data: Any) -> None:
    status = store.read_status(incident_id)
    if status == NEW:
        ensure_plan(store, incident_id)
        status = store.read_status(incident_id)
    elif status == PLAN_PROPOSED:
        # Only reachable by hand: a completed replan goes on to planned by itself.
        store.set_status(incident_id, PLANNED, reason="resume")
        status = PLANNED
    if status == PLANNED:
        store.set_status(incident_id, RUNNING, **data)


def _require_inbox(store: "Store", incident_id: str) -> None:
    bucket, _ = store.locate(incident_id)
    if bucket != INBOX:
        raise RefusedError(f"incident {incident_id} is already archived in error_archive/{bucket}")


def _refuse_interrupted_archive(store: "Store", incident_id: str) -> None:
    """An inbox incident with a final status and no recorded stop is a half-done ``selfheal
    archive`` (killed between its status change and its move): looping it would verify an
    incident someone already closed. A stop the loop itself recorded is completed instead."""
    status = store.read_status(incident_id)
    if status not in ("resolved", "escalated"):
        return
    with store.lock():
        if _pending(store, incident_id, store.read_attempts(incident_id)) is not None:
            return
    raise RefusedError(
        f"incident {incident_id} is {status} but still in error_inbox (an interrupted archive): "
        f"run `selfheal archive {incident_id} --as {status}` to finish it"
    )


# --------------------------------------------------------------------------- record


def _redactor(ralf_lite: Mapping[str, Any]) -> Any:
    section = ralf_lite.get("redaction")
    return default_redactor(section if isinstance(section, Mapping) else None)


def record_iteration(
    store: "Store",
    incident_id: str,
    *,
    ralf_lite: Mapping[str, Any],
    outcomes: Mapping[str, str],
    failures: Sequence[Failure],
    diff_hash: Optional[str],
    started_at: str,
    finished_at: str,
    mode: str,
    verification_commands: Sequence[str],
    exit_code: Optional[int],
    timed_out: bool = False,
    repair: Optional[Mapping[str, Any]] = None,
    new_failures: Sequence[Failure] = (),
    project_root: Path,
    effective_config: Optional["EffectiveConfig"] = None,
    duration_seconds: Optional[float] = None,
) -> IterationOutcome:
    """Record one verification as the incident's next attempt, decide, and close if it stops.

    Under the store lock: completes a pending stop instead if there is one (nothing new is
    recorded then); otherwise moves ``planned → running`` if needed, decides over the
    observations on disk plus this one, writes ``attempt_XX.json`` (the next free number),
    appends ``verification_finished`` (and ``repeated_failure_detected`` when the same
    failure was seen at least twice in a row), and on a stop calls :func:`finalize`.

    ``failures`` must already be redacted (verify.observe does it). ``repair`` is the
    provider's result (``{provider, result, files_changed, patch, scope_denied?,
    actions_applied?}``) or None. ``mode`` is ``verify``, ``agent`` or ``repair``.
    Raises ``RefusedError`` for an archived incident.
    """
    incident_id = validate_incident_id(incident_id)
    pol = policy.LoopPolicy.from_config(ralf_lite)
    with store.lock():
        _require_inbox(store, incident_id)
        attempts = store.read_attempts(incident_id)
        recover_events(store, incident_id, attempts)
        waiting = _pending(store, incident_id, attempts)
        if waiting is not None:
            result = finalize(
                store,
                incident_id,
                waiting,
                ralf_lite=ralf_lite,
                project_root=project_root,
                effective_config=effective_config,
            )
            line = agent_status_line(incident_id, waiting, waiting.iteration, pol.max_iterations)
            return IterationOutcome({}, waiting, True, line, result)
        incident = store.read_incident(incident_id)
        context = _read_context(store, incident_id)
        previous = observations_from_disk(incident, attempts, capture_hash=capture_diff_hash(incident, context))
        repair_result = repair.get("result") if repair is not None else None
        observation = policy.Observation(
            iteration=len(previous),
            outcomes=dict(outcomes),
            fingerprints=tuple(f.fingerprint for f in failures),
            failure_types=tuple(f.failure_type for f in failures),
            diff_hash=diff_hash,
            timed_out=timed_out,
            repair_result=repair_result if isinstance(repair_result, str) else None,
            scope_denied=bool(repair.get("scope_denied", False)) if repair is not None else False,
        )
        observations = previous + [observation]
        first_start = _run_started(attempts) or _parse_stamp(started_at)
        elapsed = _minutes(first_start, _parse_stamp(finished_at))
        decision = policy.decide(pol, observations, elapsed_minutes=elapsed)
        iteration = store.next_attempt_number(incident_id)
        _start_running(store, incident_id, iteration=iteration)
        attempt = _attempt_document(
            incident_id,
            iteration,
            observation=observation,
            decision=decision,
            failures=failures,
            new_failures=new_failures,
            started_at=started_at,
            finished_at=finished_at,
            mode=mode,
            verification_commands=verification_commands,
            exit_code=exit_code,
            duration_seconds=duration_seconds,
            repair=repair,
        )
        store.write_attempt(incident_id, attempt)
        _kill_point("record:after_attempt")
        store.append_event(incident_id, ev.VERIFICATION_FINISHED, **_event_from_attempt(attempt))
        _kill_point("record:after_verification_event")
        if decision.same_error_repeats >= 2:
            store.append_event(
                incident_id, ev.REPEATED_FAILURE_DETECTED, **_repeated_data(attempt, decision.same_error_repeats)
            )
        line = agent_status_line(incident_id, decision, decision.iteration, pol.max_iterations)
        if not decision.stopped:
            return IterationOutcome(attempt, decision, False, line)
        result = finalize(
            store,
            incident_id,
            decision,
            ralf_lite=ralf_lite,
            observations=observations,
            project_root=project_root,
            effective_config=effective_config,
        )
        return IterationOutcome(attempt, decision, True, line, result)


def _read_context(store: "Store", incident_id: str) -> Optional[Dict[str, Any]]:
    try:
        return store.read_context(incident_id)
    except (InputError, NotFoundError, StoreIOError):
        return None  # context.json is informative only: a bad one never blocks the loop


# --------------------------------------------------------------------------- finalize


def _run_runtime_minutes(attempts: Sequence[Mapping[str, Any]]) -> float:
    _, run = split_runs(attempts)
    if not run:
        return 0.0
    return round(_minutes(_parse_stamp(run[0].get("started_at")), _parse_stamp(run[-1].get("finished_at"))), 3)


def _failure_signature(incident: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> Optional[str]:
    for attempt in reversed(attempts):
        if attempt.get("error_signature"):
            return str(attempt["error_signature"])
    signature = incident.get("error_signature")
    return str(signature) if signature else None


def _redact_config(redactor: Any, value: Any) -> Any:
    """Redact a config value; in argv lists (``repair.command``) a word following a flag is
    checked as ``--flag=word`` too, so ``["agent", "--token", "abc123"]`` loses its secret."""
    if isinstance(value, dict):
        return {k: _redact_config(redactor, v) for k, v in value.items()}
    if isinstance(value, list):
        out: List[Any] = []
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


def _effective_config_doc(
    ralf_lite: Mapping[str, Any], effective_config: Optional["EffectiveConfig"]
) -> Tuple[Dict[str, Any], Optional[Dict[str, str]]]:
    values = _redact_config(_redactor(ralf_lite), dict(effective_config.values if effective_config is not None else ralf_lite))
    origins = dict(effective_config.origins) if effective_config is not None else None
    return values, origins


def build_run_result(
    incident_id: str,
    decision: policy.Decision,
    *,
    observations: Sequence[policy.Observation],
    attempts: Sequence[Mapping[str, Any]],
    pol: policy.LoopPolicy,
    failure_signature: Optional[str],
    ralf_lite: Mapping[str, Any],
    effective_config: Optional["EffectiveConfig"] = None,
) -> Dict[str, Any]:
    """``run_result.json`` for a stop (pure): contract fields + the extensions of docs/architecture.md.

    Deterministic for a given stop and attempts (runtime from the attempts' timestamps),
    so a resumed close-out writes the same document.
    """
    final = final_status_of(decision.stop_reason)
    archived_to = f"error_archive/{final}/{incident_id}" if final in (policy.FINAL_RESOLVED, policy.FINAL_ESCALATED) else None
    values, origins = _effective_config_doc(ralf_lite, effective_config)
    point = policy.decision_point(decision, observations, pol, incident_id=incident_id, failure_signature=failure_signature)
    result: Dict[str, Any] = {
        "incident_id": incident_id,
        "final_status": final,
        "loops_used": decision.iteration,
        "runtime_minutes": _run_runtime_minutes(attempts),
        "same_error_repeats": decision.same_error_repeats,
        "archived_to": archived_to,
        "stop_reason": decision.stop_reason,
        "message": decision.message,
        "iteration": int(attempts[-1]["iteration"]) if attempts else 0,
        "flaky_tests": policy.flaky_tests(observations),
        "tests_fixed": policy.fixed_tests(observations),
        "fingerprints_per_iteration": [list(o.fingerprints) for o in observations],
        "decision_point": point,
        "handoff": policy.handoff(observations, decision),
        "decision": decision.to_dict(),
        "effective_config": values,
    }
    if origins is not None:
        result["effective_config_origins"] = origins
    return result


def finalize(
    store: "Store",
    incident_id: str,
    decision: policy.Decision,
    *,
    ralf_lite: Mapping[str, Any],
    observations: Optional[Sequence[policy.Observation]] = None,
    project_root: Path,
    effective_config: Optional["EffectiveConfig"] = None,
) -> Dict[str, Any]:
    """Close the loop for ``decision`` (a stop); returns the run result. Idempotent.

    - resolved/escalated: ``run_result.json``, ``decision_point_needed`` + ``loop_stopped``,
      then ``Store.archive`` (status move + ``incident_archived`` + one rename);
    - ``replan_requested``: ``run_result.json`` (``archived_to: null``), the events,
      ``running → plan_proposed``, the plan regenerated with ``plan.replan`` (``plan_generated``
      with ``replan: true``), ``plan_proposed → planned``; nothing archived;
    - ``cancelled`` / ``disabled``: only the two events (always appended: each is a new
      stop); nothing else changes, the incident stays open and resumable. The returned
      dict has the run-result shape with ``final_status: null`` and is not written.

    Every step checks what is already done (the run result of this stop, each event of
    this stop — keyed by the last attempt number and the stop reason —, the status, the
    plan's ``replanned_at_iteration``), so a resume after a kill at any point completes it
    without duplicates. ``observations`` default to the ones on disk.
    """
    if not decision.stopped or decision.stop_reason is None:
        raise ValueError("finalize() needs a decision that stops the loop")
    reason = decision.stop_reason
    pol = policy.LoopPolicy.from_config(ralf_lite)
    with store.lock():
        bucket, _ = store.locate(incident_id)
        attempts = store.read_attempts(incident_id)
        incident = store.read_incident(incident_id)
        if observations is None:
            context = _read_context(store, incident_id)
            observations = observations_from_disk(incident, attempts, capture_hash=capture_diff_hash(incident, context))
        last = int(attempts[-1]["iteration"]) if attempts else 0
        result = build_run_result(
            incident_id,
            decision,
            observations=observations,
            attempts=attempts,
            pol=pol,
            failure_signature=_failure_signature(incident, attempts),
            ralf_lite=ralf_lite,
            effective_config=effective_config,
        )
        point = result["decision_point"]
        stop_data = {"iteration": last, "stop_reason": reason}
        if reason in (policy.CANCELLED, policy.DISABLED):
            store.append_event(incident_id, ev.DECISION_POINT_NEEDED, **stop_data, decision_point=point)
            store.append_event(
                incident_id, ev.LOOP_STOPPED, **stop_data, final_status=None, loop_iteration=decision.iteration,
                message=decision.message,
            )
            return result
        if bucket != INBOX:
            # Archived already: the close-out completed (the archive is its last step).
            existing = store.read_run_result(incident_id)
            return existing if existing is not None else result
        existing = store.read_run_result(incident_id)
        if existing is None or existing.get("iteration") != last or existing.get("stop_reason") != reason:
            store.write_run_result(incident_id, result)
        _kill_point("finalize:after_run_result")
        records, _ = store.read_events(incident_id)
        if not _has_event(records, ev.DECISION_POINT_NEEDED, **stop_data):
            store.append_event(incident_id, ev.DECISION_POINT_NEEDED, **stop_data, decision_point=point)
        _kill_point("finalize:after_decision_point")
        if not _has_event(records, ev.LOOP_STOPPED, **stop_data):
            store.append_event(
                incident_id,
                ev.LOOP_STOPPED,
                **stop_data,
                final_status=result["final_status"],
                archived_to=result["archived_to"],
                loop_iteration=decision.iteration,
                flaky_tests=result["flaky_tests"],
                tests_fixed=result["tests_fixed"],
                message=decision.message,
            )
        _kill_point("finalize:after_loop_stopped")
        if reason == policy.REPLAN_REQUESTED:
            _replan(store, incident_id, attempts, last)
        else:
            _kill_point("finalize:before_archive")
            store.archive(incident_id, str(result["final_status"]))
        return result


def _replan(store: "Store", incident_id: str, attempts: Sequence[Mapping[str, Any]], last: int) -> None:
    """running → plan_proposed → (plan regenerated) → planned, each step skipped when done."""
    status = store.read_status(incident_id)
    if status == RUNNING:
        store.set_status(incident_id, PLAN_PROPOSED, reason="replan_requested", iteration=last)
        status = PLAN_PROPOSED
    _kill_point("finalize:after_plan_proposed")
    if status != PLAN_PROPOSED:
        return  # planned already: the replan completed before a kill
    plan = store.read_plan(incident_id)
    if plan.get("replanned_at_iteration") != last:
        _, run = split_runs(attempts[:-1]) if attempts else (None, [])
        run_attempts = list(run) + ([attempts[-1]] if attempts else [])
        new = replan(plan, run_attempts, generated_at=ev.format_ts())
        new["replanned_at_iteration"] = last
        store.write_plan(incident_id, new, render_plan_md(new))
        plan = new
    _kill_point("finalize:after_replan_written")
    records, _ = store.read_events(incident_id)
    if not _has_event(records, ev.PLAN_GENERATED, replanned_at_iteration=last):
        store.append_event(
            incident_id,
            ev.PLAN_GENERATED,
            replan=True,
            revision=plan.get("revision"),
            replanned_at_iteration=last,
            actions=[a.get("id") for a in plan.get("actions", []) if isinstance(a, Mapping)],
        )
    store.set_status(incident_id, PLANNED, reason="replan", iteration=last)


# --------------------------------------------------------------------------- locks, signals


@contextmanager
def loop_lock(store: "Store", incident_id: str) -> Iterator[None]:
    """The per-incident loop lock (``error_runs/<id>/.loop.lock``), taken without waiting.

    Held → ``RefusedError`` ("a loop is already running for <id>", exit 5). The OS drops
    it when the process dies, so a killed loop never blocks the next one.
    """
    folder = fsio.ensure_dir(store.runs_dir(incident_id))
    lock = fsio.FileLock(folder / LOOP_LOCK_FILE, timeout=0.0)
    try:
        lock.acquire()
    except StoreIOError as exc:
        if "timed out" in exc.message:
            raise RefusedError(f"a loop is already running for {incident_id}") from None
        raise
    try:
        yield
    finally:
        lock.release()


class _Interrupted(BaseException):
    """Raised by the signal handler out of an interruptible section (never reaches users)."""


class CancelState:
    """Ctrl-C / SIGTERM bookkeeping: signals are *deferred* except inside :meth:`interruptible`.

    Deferred, a signal only sets :attr:`requested` (recording an attempt or closing the
    loop is never cut in half); inside an interruptible section (a verification run, a
    repair provider call) it raises at once, and the ``finally`` of ``run_selection``
    kills the child's process group.
    """

    def __init__(self) -> None:
        self.requested = False
        self.signum: Optional[int] = None
        self._open = 0

    def handler(self, signum: int, frame: Optional[FrameType]) -> None:
        first = not self.requested
        self.requested = True
        self.signum = signum
        # Raise once: a second Ctrl-C must not cut short the cleanup of the first.
        if self._open > 0 and first:
            raise _Interrupted()

    def check(self) -> None:
        """Raise when a signal arrived while deferred."""
        if self.requested:
            raise _Interrupted()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        self.check()
        self._open += 1
        try:
            yield
        finally:
            self._open -= 1

    @property
    def name(self) -> str:
        if self.signum is None:
            return "interrupt"
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return str(self.signum)


@contextmanager
def _signal_handlers(state: CancelState) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    wanted = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    old = {sig: signal.signal(sig, state.handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------- the loop


def selection_nodeids(plan: Mapping[str, Any], incident: Mapping[str, Any], argvs: Sequence[Sequence[str]]) -> List[str]:
    """The node ids the verification commands select: the plan's action node ids that
    appear in the commands, else the command words holding ``::``."""
    words = {word for argv in argvs for word in argv}
    candidates: List[str] = []
    for action in plan.get("actions") or []:
        if isinstance(action, Mapping):
            for nodeid in action.get("nodeids") or []:
                if isinstance(nodeid, str) and nodeid not in candidates:
                    candidates.append(nodeid)
    if not candidates:
        for nodeid in incident.get("nodeids") or []:
            if isinstance(nodeid, str) and nodeid not in candidates:
                candidates.append(nodeid)
    chosen = [n for n in candidates if n in words]
    if chosen:
        return chosen
    return list(dict.fromkeys(word for argv in argvs for word in argv[1:] if "::" in word and not word.startswith("-")))


def _exclude_from_argvs(argvs: Sequence[Sequence[str]], excluded: Sequence[str]) -> List[List[str]]:
    """Drop excluded node ids from the commands; a command left with no node id at all is
    dropped too (it would run the whole suite)."""
    if not excluded:
        return [list(a) for a in argvs]
    gone = set(excluded)
    out: List[List[str]] = []
    for argv in argvs:
        kept = [w for w in argv if w not in gone]
        if len(kept) < len(argv) and not any("::" in w or w.endswith(".py") for w in kept[1:]):
            continue
        out.append(kept)
    return out


def _command_text(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)


def _refuse_command(store: "Store", incident_id: str, argv: Sequence[str], exc: RefusedError) -> None:
    """Log a refused verification command: one ``decision_point_needed`` (nothing ran)."""
    command = _command_text(argv)
    point = {
        "reason": "verification_command_refused",
        "message": exc.message,
        "options": [
            {"id": "regenerate_plan", "label": "Regenerate the plan from the incident", "command": f"selfheal plan {incident_id} --force"},
            {"id": "allowlist", "label": "Add the runner to ralf_lite.verification.allowlist (only if you trust it)", "command": None},
            {"id": "stop", "label": "Give up and archive as escalated", "command": f"selfheal archive {incident_id} --as escalated"},
        ],
        "context": {"command": command},
    }
    store.append_event(
        incident_id, ev.DECISION_POINT_NEEDED, refused=True, command=command, reason=exc.message, decision_point=point
    )


def _plan_argvs(plan: Mapping[str, Any], incident_id: str) -> List[List[str]]:
    """The plan's commands as argv lists; a plan without any is unusable (``InputError``, exit 3)."""
    argvs = verification_argv(plan)
    if not argvs:
        raise InputError(
            f"plan.json of {incident_id} has no verification_commands; regenerate it with "
            f"`selfheal plan {incident_id} --force`"
        )
    return argvs


def _open_stop_decision(reason: str, message: str, iteration: int) -> policy.Decision:
    baseline = policy.Progress(False, ("baseline",), False, ())
    return policy.Decision(policy.ACTION_STOP, reason, None, baseline, 0, 0, False, message, iteration, (reason,))


def run_loop(
    store: "Store",
    incident_id: str,
    *,
    effective: "EffectiveConfig",
    project_root: Path,
    provider: Optional[Provider] = None,
    approve: bool = False,
    out: Optional[Callable[[str], None]] = None,
    unattended: Optional[bool] = None,
    env: Optional[Mapping[str, str]] = None,
    hook_rules: Sequence[Mapping[str, Any]] = (),
) -> Dict[str, Any]:
    """Run (or resume) the loop of one incident until it stops; returns the run result.

    Resumes from disk: completes a pending stop, else continues at the next attempt
    number. Refuses (``RefusedError``, exit 5) an archived incident, a second loop on the
    same incident, and verification commands that are not allowlisted (logged, never
    run). Ctrl-C/SIGTERM kills the running verification's process group, records
    ``cancelled`` (events only, the incident stays ``running`` and resumable) and raises
    ``Cancelled`` (exit 130). ``unattended`` (default: stdin is not a TTY) and
    ``approve`` feed ``apply_to.autonomous_plans``. For ``disabled`` stops the returned
    dict has ``final_status: null`` and is not written to disk. ``hook_rules``: extra
    classification rules from ``pytest_selfheal_classification_rules`` (inside pytest), so
    a failure gets the same type — and fingerprint — as at capture. ``env``: the
    verification's environment (default ``os.environ``).
    """
    incident_id = validate_incident_id(incident_id)
    _require_inbox(store, incident_id)
    _refuse_interrupted_archive(store, incident_id)
    say = out or (lambda line: None)
    if unattended is None:
        import sys

        unattended = not (sys.stdin is not None and sys.stdin.isatty())
    state = CancelState()
    with loop_lock(store, incident_id), _signal_handlers(state):
        try:
            return _drive(
                store, incident_id, effective=effective, project_root=Path(project_root), provider=provider,
                approve=approve, unattended=unattended, say=say, state=state, env=env, hook_rules=hook_rules,
            )
        except (_Interrupted, KeyboardInterrupt):
            state.requested = True
            _cancel(store, incident_id, effective=effective, project_root=Path(project_root), say=say)
            raise Cancelled(
                f"cancelled by {state.name}: incident {incident_id} left open, recorded attempts kept; "
                f"resume with `selfheal loop {incident_id}`"
            ) from None


def _cancel(store: "Store", incident_id: str, *, effective: "EffectiveConfig", project_root: Path, say: Callable[[str], None]) -> None:
    ralf_lite = effective.values
    pol = policy.LoopPolicy.from_config(ralf_lite)
    with store.lock():
        attempts = store.read_attempts(incident_id)
        incident = store.read_incident(incident_id)
        context = _read_context(store, incident_id)
        observations = observations_from_disk(incident, attempts, capture_hash=capture_diff_hash(incident, context))
        decision = policy.decide(pol, observations, cancelled=True)
        if decision.stop_reason != policy.CANCELLED:
            # Only disabled/success outrank cancelled; neither can be pending here.
            decision = _open_stop_decision(policy.CANCELLED, "Cancelled; recorded attempts are saved.", decision.iteration)
        finalize(store, incident_id, decision, ralf_lite=ralf_lite, observations=observations,
                 project_root=project_root, effective_config=effective)
    say(agent_status_line(incident_id, decision, decision.iteration, pol.max_iterations))


def _drive(
    store: "Store",
    incident_id: str,
    *,
    effective: "EffectiveConfig",
    project_root: Path,
    provider: Optional[Provider],
    approve: bool,
    unattended: bool,
    say: Callable[[str], None],
    state: CancelState,
    env: Optional[Mapping[str, str]],
    hook_rules: Sequence[Mapping[str, Any]],
) -> Dict[str, Any]:
    ralf_lite = effective.values
    pol = policy.LoopPolicy.from_config(ralf_lite)

    def close(decision: policy.Decision) -> Dict[str, Any]:
        result = finalize(store, incident_id, decision, ralf_lite=ralf_lite, project_root=project_root,
                          effective_config=effective)
        say(agent_status_line(incident_id, decision, decision.iteration, pol.max_iterations))
        say(_final_line(incident_id, result))
        return result

    with store.lock():
        attempts = store.read_attempts(incident_id)
        recover_events(store, incident_id, attempts)
        waiting = _pending(store, incident_id, attempts)
        if waiting is not None:
            say(f"selfheal: incident {incident_id}: completing the recorded stop ({waiting.stop_reason})")
            return close(waiting)
        plan = ensure_plan(store, incident_id)
        incident = store.read_incident(incident_id)

    argvs = _plan_argvs(plan, incident_id)
    nodeids = selection_nodeids(plan, incident, argvs)
    tdd = [n for n in incident.get("tdd_nodeids") or [] if isinstance(n, str)]
    # A plan without node ids verifies collection (pytest --collect-only): one pseudo test.
    selection = policy.loop_selection(
        pol, nodeids or [COLLECTION_KEY], tdd_nodeids=tdd, unattended=unattended, approved=approve
    )
    if selection.refused is not None:
        iteration = len(split_runs(attempts)[1])
        decision = _open_stop_decision(policy.DISABLED, f"The loop did not run: {selection.refused}.", iteration)
        result = finalize(store, incident_id, decision, ralf_lite=ralf_lite, project_root=project_root,
                          effective_config=effective)
        say(agent_status_line(incident_id, decision, iteration, pol.max_iterations))
        return result
    argvs = _exclude_from_argvs(argvs, selection.excluded)
    nodeids = [n for n in nodeids if n not in selection.excluded]
    allowlist = list(effective.get("verification.allowlist") or [])
    for argv in argvs:
        try:
            check_allowed(argv, allowlist)
        except RefusedError as exc:
            _refuse_command(store, incident_id, argv, exc)
            raise
    commands = [_command_text(a) for a in argvs]
    timeout = effective.get("verification.timeout_seconds")

    with store.lock():
        _start_running(store, incident_id, reason="loop")
    _kill_point("loop:after_running")

    while True:
        state.check()
        attempts = store.read_attempts(incident_id)
        context = _read_context(store, incident_id)
        observations = observations_from_disk(incident, attempts, capture_hash=capture_diff_hash(incident, context))
        started = _run_started(attempts)
        pre = policy.decide(pol, observations, elapsed_minutes=_minutes(started, _utcnow()) if started else 0.0)
        if pre.stopped and pre.stop_reason != policy.REPLAN_REQUESTED:
            # Before running anything: the capture alone is decisive (tooling_env,
            # max_iterations 0), the runtime budget is gone, or the config changed.
            return close(pre)
        _, run = split_runs(attempts)
        next_number = int(attempts[-1]["iteration"]) + 1 if attempts else 1
        repair: Optional[Dict[str, Any]] = None
        if provider is not None:
            with state.interruptible():
                repair = provider(
                    incident_id=incident_id,
                    iteration=next_number,
                    store=store,
                    plan=plan,
                    last_attempt=dict(run[-1]) if run else None,
                    observations=list(observations),
                )
        verify_cwd = Path(repair["worktree"]) if repair and isinstance(repair.get("worktree"), str) else project_root
        say(f"selfheal: incident {incident_id} iteration {pre.iteration + 1} of {pol.max_iterations}: "
            f"running {'; '.join(commands)}")
        _kill_point("iteration:before_verify")
        outcome = _verify_and_record(
            store, incident_id, argvs=argvs, commands=commands, nodeids=nodeids, cwd=verify_cwd,
            timeout=timeout, effective=effective, project_root=project_root, repair=repair, state=state,
            env=env, mode="repair" if repair else "verify", hook_rules=hook_rules,
        )
        say(outcome.status_line)
        if outcome.closed:
            assert outcome.run_result is not None
            say(_final_line(incident_id, outcome.run_result))
            return outcome.run_result


def _verify_and_record(
    store: "Store",
    incident_id: str,
    *,
    argvs: Sequence[Sequence[str]],
    commands: Sequence[str],
    nodeids: Sequence[str],
    cwd: Path,
    timeout: Optional[float],
    effective: "EffectiveConfig",
    project_root: Path,
    repair: Optional[Dict[str, Any]],
    state: CancelState,
    env: Optional[Mapping[str, str]],
    mode: str,
    hook_rules: Sequence[Mapping[str, Any]] = (),
) -> IterationOutcome:
    """One iteration: the diff hash (in a thread, while the tests run), every verification
    command, observe, then :func:`record_iteration` with signals deferred."""
    ralf_lite = effective.values
    redactor = _redactor(ralf_lite)
    rules = rules_for_run(effective.get("classification.rules") or [], hook_rules)
    started = _utcnow()
    hashed: Dict[str, Optional[str]] = {}
    hasher = threading.Thread(
        target=lambda: hashed.__setitem__("value", diff_hash(cwd, exclude=[store.root])), daemon=True
    )
    hasher.start()
    outcomes: Dict[str, str] = {}
    failures: List[Failure] = []
    codes: List[Optional[int]] = []
    timed_out = False
    duration = 0.0
    with tempfile.TemporaryDirectory(prefix="selfheal-verify-") as tmp:
        for index, argv in enumerate(argvs):
            with state.interruptible():
                run = run_selection(argv, cwd=cwd, junit_path=Path(tmp) / f"junit_{index}.xml",
                                    timeout_seconds=timeout, env=env)
            got, failed = observe(run, [n for n in nodeids if n in argv] or list(nodeids), rules=rules, redactor=redactor)
            outcomes.update(got)
            failures.extend(failed)
            duration += run.duration_seconds
            timed_out = timed_out or run.timed_out
            codes.append(run.exit_code)
    hasher.join()
    # The first failing command's code (None: timed out or could not start), else 0.
    exit_code = next((c for c in codes if c != 0), 0) if codes else None
    _kill_point("iteration:after_verify")
    finished = _utcnow()
    outcome = record_iteration(
        store,
        incident_id,
        ralf_lite=ralf_lite,
        outcomes=outcomes,
        failures=failures,
        diff_hash=hashed.get("value"),
        started_at=_stamp(started),
        finished_at=_stamp(finished),
        mode=mode,
        verification_commands=commands,
        exit_code=exit_code,
        timed_out=timed_out,
        repair=repair,
        project_root=project_root,
        effective_config=effective,
        duration_seconds=duration,
    )
    if not outcome.closed:
        state.check()  # a signal that arrived while recording cancels now, between iterations
    return outcome


def verify_iteration(
    store: "Store",
    incident_id: str,
    *,
    effective: "EffectiveConfig",
    project_root: Path,
    repair: Optional[Dict[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
    hook_rules: Sequence[Mapping[str, Any]] = (),
) -> IterationOutcome:
    """Run ONE iteration now — the plan's verification selections, observe, record,
    decide (closing the loop if it stops) — without the loop around it: no loop lock, no
    signal handling, no pre-checks. For embedding (the plugin, benchmarks); ``run_loop``
    is the full driver. Not-allowlisted commands raise ``RefusedError``, nothing runs.
    """
    incident_id = validate_incident_id(incident_id)
    plan = store.read_plan(incident_id)
    incident = store.read_incident(incident_id)
    argvs = _plan_argvs(plan, incident_id)
    for argv in argvs:
        check_allowed(argv, list(effective.get("verification.allowlist") or []))
    return _verify_and_record(
        store, incident_id, argvs=argvs, commands=[_command_text(a) for a in argvs],
        nodeids=selection_nodeids(plan, incident, argvs), cwd=project_root,
        timeout=effective.get("verification.timeout_seconds"), effective=effective, project_root=project_root,
        repair=repair, state=CancelState(), env=env, mode="repair" if repair else "verify", hook_rules=hook_rules,
    )


def _final_line(incident_id: str, result: Mapping[str, Any]) -> str:
    where = f" -> {result['archived_to']}" if result.get("archived_to") else ""
    return (
        f"selfheal: incident {incident_id} {result.get('final_status') or 'open'}: stop_reason "
        f"{result.get('stop_reason')} after {result.get('loops_used')} iteration(s){where}"
    )


__all__ = [
    "CancelState",
    "IterationOutcome",
    "KILL_ENV",
    "KILL_STEPS",
    "LOOP_LOCK_FILE",
    "agent_status_line",
    "build_run_result",
    "capture_diff_hash",
    "ensure_plan",
    "final_status_of",
    "finalize",
    "loop_lock",
    "observations_from_disk",
    "pending_stop",
    "record_iteration",
    "recover_events",
    "run_loop",
    "selection_nodeids",
    "split_runs",
    "verify_iteration",
]
