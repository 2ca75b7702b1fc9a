"""What the loop derives from the records :class:`~pytest_selfheal.loop.state.LoopRun` holds:
its runs, observations, a pending stop, the events an attempt implies, and the timestamps."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Optional

from pytest_selfheal.errors import InputError, NotFoundError, StoreIOError
from pytest_selfheal.gitrepo import clean_tree_hash
from pytest_selfheal.loop import policy
from pytest_selfheal.records.attempt import Attempt, Decision
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.jsondoc import freeze
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.vocab import IncidentStatus, StopReason
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.root import Store

# --------------------------------------------------------------------------- time


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def stamp(moment: datetime) -> str:
    """The timestamp form of the records (ISO 8601, milliseconds)."""
    return ev.format_ts(moment, "milliseconds")


def parse_stamp(text: Any) -> Optional[datetime]:
    """A recorded timestamp as an aware datetime (naive ones are UTC); None when invalid."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def minutes_between(start: Optional[datetime], end: Optional[datetime]) -> float:
    """Minutes from ``start`` to ``end``, never negative; 0 when either is unknown."""
    if start is None or end is None:
        return 0.0
    return max(0.0, (end - start).total_seconds() / 60.0)


# --------------------------------------------------------------------------- runs and observations


def split_runs(
    attempts: Sequence[Attempt], reopened: Optional[int] = None
) -> tuple[Optional[Attempt], list[Attempt]]:
    """``(baseline attempt or None, attempts of the current loop run)``. A ``replan_requested``
    stop or a reopen after attempt ``reopened`` ends a loop run: the next starts afresh, with
    the previous run's last attempt as its baseline instead of the capture."""
    boundary = -1
    for index, attempt in enumerate(attempts):
        if attempt.result == policy.ACTION_STOP and attempt.stop_reason == StopReason.REPLAN_REQUESTED:
            boundary = index
        if reopened and attempt.iteration == reopened:
            boundary = index  # attempts are sorted: a later replan still moves it on
    if boundary < 0:
        return None, list(attempts)
    return attempts[boundary], list(attempts[boundary + 1:])


def capture_diff_hash(incident: Incident, context: Optional[RunContext] = None) -> Optional[str]:
    """The working-tree diff hash at capture time: recorded, or a clean tree's at the
    commit ``context.json`` names; None when unknown."""
    if incident.diff_hash:
        return incident.diff_hash
    commit = context.git.clean_commit if context is not None and context.git is not None else None
    return clean_tree_hash(commit) if commit is not None else None


def capture_hash_on_disk(store: Store, incident_id: str, incident: Incident) -> Optional[str]:
    """:func:`capture_diff_hash`, reading ``context.json`` only when needed (a bad one never
    blocks the loop)."""
    if incident.diff_hash:
        return incident.diff_hash
    try:
        context = store.read_context(incident_id)
    except (InputError, NotFoundError, StoreIOError):
        return None
    return capture_diff_hash(incident, context)


def observations_of(
    incident: Incident,
    attempts: Sequence[Attempt],
    *,
    capture_hash: Optional[str] = None,
) -> list[policy.Observation]:
    """The observations of the current loop run: the capture (or the previous run's last
    attempt, without its repair call's verdict), then one per attempt."""
    baseline, run = split_runs(attempts, policy.reopened_after(incident))
    if baseline is None:
        diff = capture_hash if capture_hash is not None else incident.diff_hash or None
        first = policy.capture_observation(incident, diff_hash=diff)
    else:
        # The failure state the previous run ended in, not what its last repair call did: a
        # scope denial, a test edit, an escape or a provider that gave up belongs to that run
        # and its stop. A reopened run (with approval, wider scope, another provider) starts
        # from the code and its failures alone, with its own budget.
        first = dataclasses.replace(policy.observation_from_attempt(baseline), iteration=0, repair_result=None,
                                    scope_denied=False, tests_edited=(), provider_escaped=False)
    return [first] + [policy.observation_from_attempt(a) for a in run]


def run_started(attempts: Sequence[Attempt], reopened: Optional[int] = None) -> Optional[datetime]:
    """When the current loop run's first attempt started; None before it."""
    _, run = split_runs(attempts, reopened)
    return parse_stamp(run[0].started_at) if run else None


def _decision_from_record(data: Decision) -> Decision:
    """A recorded decision, its missing keys filled in as the policy would have written them."""
    reason = data.stop_reason
    return policy.decision(
        data.action or (policy.ACTION_STOP if reason else policy.ACTION_CONTINUE),
        reason,
        data.final_status if data.final_status is not None else policy.final_status_of(reason),
        policy.progress_signal(bool(data.progress), data.progress_reasons, bool(data.fingerprint_changed), data.tests_fixed),
        data.same_error_repeats,
        data.no_progress_streak,
        bool(data.retry_timeout),
        data.message or f"Stopped: {reason}.",
        data.iteration,
        data.conditions or ((reason,) if reason else ()),
    )


def pending_stop(
    attempts: Sequence[Attempt],
    run_result: Optional[RunResult],
    status: str,
    replanned_at: Optional[int] = None,
    reopened: Optional[int] = None,
) -> Optional[Decision]:
    """A recorded stop whose close-out has not completed, or None. The most recent record
    wins (``run_result.json`` of the latest attempt, else that attempt). A replan is complete
    once back to ``planned``, or regenerated (``replanned_at``) with the status moved on."""
    last = attempts[-1].iteration if attempts else 0
    if policy.stop_is_history(reopened, last, status):
        return None  # the stop before `selfheal reopen`: the new loop run has not stopped yet
    source: Optional[Decision] = None
    if run_result is not None and run_result.iteration == last and run_result.stop_reason:
        source = run_result.decision or Decision(stop_reason=run_result.stop_reason)
    elif attempts and attempts[-1].result == policy.ACTION_STOP:
        source = attempts[-1].decision or Decision(stop_reason=attempts[-1].stop_reason)
    if source is None or not source.stop_reason:
        return None
    decision = _decision_from_record(source)
    if decision.stop_reason == StopReason.REPLAN_REQUESTED and (
        status == IncidentStatus.PLANNED or (replanned_at == last and status != IncidentStatus.PLAN_PROPOSED)
    ):
        return None
    return decision


# --------------------------------------------------------------------------- events


def _recorded(attempt: Attempt, key: str) -> Any:
    """A key of the attempt's recorded decision, None when absent."""
    decision = attempt.decision
    if decision is None or decision.keys is not None and key not in decision.keys:
        return None
    return getattr(decision, key)


def _failure_key(failure: Failure, key: str) -> Any:
    """``fingerprint`` / ``failure_type`` of a recorded failure, None when the file lacks it."""
    return getattr(failure, key) if failure.keys is None or key in failure.keys else None


def _event(name: str, **data: Any) -> Event:
    return Event(event=name, extra=tuple((key, freeze(value)) for key, value in data.items()))


def verification_event(attempt: Attempt) -> Event:
    """The ``verification_finished`` event of an attempt: enough to replay the loop from events alone."""
    failures = attempt.failures
    return _event(
        ev.VERIFICATION_FINISHED,
        iteration=attempt.iteration,
        loop_iteration=_recorded(attempt, "iteration"),
        mode=attempt.mode,
        verification_passed=attempt.verification_passed,
        result=attempt.result,
        stop_reason=attempt.stop_reason,
        outcomes=dict(attempt.outcomes),
        fingerprints=[_failure_key(f, "fingerprint") for f in failures],
        failure_types=[_failure_key(f, "failure_type") for f in failures],
        error_signature=attempt.error_signature,
        diff_hash=attempt.diff_hash,
        timed_out=bool(attempt.timed_out),
        repair_result=attempt.repair.result if attempt.repair is not None else None,
        scope_denied=bool(attempt.scope_denied),
        progress=attempt.progress,
        progress_reasons=list(attempt.progress_reasons),
        fingerprint_changed=attempt.fingerprint_changed,
        same_error_repeats=_recorded(attempt, "same_error_repeats"),
        no_progress_streak=_recorded(attempt, "no_progress_streak"),
        exit_code=attempt.exit_code,
    )


def has_event(records: Sequence[Event], name: str, **match: Any) -> bool:
    return any(r.event == name and all(r.get(k) == v for k, v in match.items()) for r in records)


def repeated_failure_event(attempt: Attempt, repeats: int) -> Event:
    return _event(
        ev.REPEATED_FAILURE_DETECTED,
        iteration=attempt.iteration,
        fingerprints=sorted({str(_failure_key(f, "fingerprint")) for f in attempt.failures}),
        error_signature=attempt.error_signature,
        same_error_repeats=repeats,
    )
