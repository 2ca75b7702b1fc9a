"""The loop state of one incident, held in memory for a whole loop run (docs/architecture.md
"The loop state"), and what the loop derives from it: its runs, observations, a pending stop,
the events an attempt implies, and the timestamps.

Read from the files once; from then on the loop writes *through* it (to the store and into
the state in the same step), so no step reads back what an earlier one wrote. The files stay
the record and the crash recovery.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import clean_tree_hash
from pytest_selfheal.loop import policy
from pytest_selfheal.records.attempt import Attempt, Decision
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.jsondoc import freeze
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.vocab import IncidentStatus, StopReason
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store


@dataclass(frozen=True)
class RunRecords:
    """The records every view of a loop run's state reads (``selfheal replay`` too, which must
    answer when ``incident.json`` is unreadable)."""

    incident_id: str
    bucket: str
    status: str
    attempts: list[Attempt]
    run_result: Optional[RunResult]


def read_records(store: Store, incident_id: str) -> RunRecords:
    incident_id = validate_incident_id(incident_id)
    bucket, _ = store.locate(incident_id)
    return RunRecords(incident_id, bucket, store.read_status(incident_id), store.read_attempts(incident_id),
                      store.read_run_result(incident_id))


@dataclass
class LoopRun:
    """One incident's loop state: what its files say, kept current by writing through it.
    ``events``: the log as read plus what :meth:`append_event` added (the close-out checks them)."""

    store: Store
    incident: Incident
    bucket: str  # inbox, or the archive bucket the folder is in
    status: str  # status.txt
    plan: Optional[Plan]  # None before a plan was written (a capture killed before it)
    attempts: list[Attempt]
    run_result: Optional[RunResult]
    events: list[Event]
    capture_hash: Optional[str]  # the capture's diff hash (observation 0 of a first run)

    @classmethod
    def read(cls, store: Store, incident_id: str, incident: Optional[Incident] = None,
             plan: Optional[Plan] = None) -> LoopRun:
        """The state from the files, each read once (``incident``, ``plan``: as the caller read them)."""
        records = read_records(store, incident_id)
        incident = incident or store.read_incident(records.incident_id)
        iid = incident.incident_id
        if plan is None and store.has_plan(iid):
            plan = store.read_plan(iid)
        return cls(store, incident, records.bucket, records.status, plan, records.attempts, records.run_result,
                   store.read_events(iid)[0], capture_hash_on_disk(store, iid, incident))

    @classmethod
    def resume(cls, store: Store, incident_id: str, incident: Optional[Incident] = None,
               plan: Optional[Plan] = None) -> LoopRun:
        """:meth:`read` under the store lock, and the events a kill lost appended."""
        with store.lock():
            run = cls.read(store, incident_id, incident, plan)
            if run.bucket == INBOX:
                run.recover_events()
            return run

    def refresh(self) -> None:
        """Read the files again when another process moved them on (an embedding without the
        loop lock). Call under the store lock."""
        bucket, _ = self.store.locate(self.incident_id)
        if bucket == self.bucket and self.store.next_attempt_number(self.incident_id) == self.next_iteration:
            return
        fresh = LoopRun.resume(self.store, self.incident_id)
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(fresh, field.name))

    @property
    def incident_id(self) -> str:
        return self.incident.incident_id

    @property
    def reopened(self) -> Optional[int]:
        return policy.reopened_after(self.incident)

    @property
    def next_iteration(self) -> int:
        return self.attempts[-1].iteration + 1 if self.attempts else 1

    def split(self) -> tuple[Optional[Attempt], list[Attempt]]:
        return split_runs(self.attempts, self.reopened)

    def require_plan(self) -> Plan:
        return self.plan if self.plan is not None else self.store.read_plan(self.incident_id)

    def observations(self) -> list[policy.Observation]:
        """The capture (or the previous run's last attempt, without its repair's verdict), then one per attempt."""
        baseline, run = self.split()
        if baseline is None:
            diff = self.capture_hash if self.capture_hash is not None else self.incident.diff_hash or None
            first = policy.capture_observation(self.incident, diff_hash=diff)
        else:
            # The failure state the previous run ended in, not what its last repair call did: a
            # scope denial, a test edit, an escape or a provider that gave up belongs to that run
            # and its stop. A reopened run (with approval, wider scope, another provider) starts
            # from the code and its failures alone, with its own budget.
            first = dataclasses.replace(policy.observation_from_attempt(baseline), iteration=0, repair_result=None,
                                        scope_denied=False, tests_edited=(), provider_escaped=False)
        return [first] + [policy.observation_from_attempt(a) for a in run]

    def started(self) -> Optional[datetime]:
        """When the current loop run's first attempt started; None before it."""
        run = self.split()[1]
        return parse_stamp(run[0].started_at) if run else None

    def pending(self) -> Optional[Decision]:
        replanned_at = self.plan.replanned_at_iteration if self.plan is not None else None
        return pending_stop(self.attempts, self.run_result, self.status, replanned_at,
                            policy.stop_history_after(self.incident))

    def set_status(self, new: str, **data: Any) -> None:
        self.incident = self.store.set_status(self.incident_id, new, held=(self.status, self.incident), **data)
        self.status = new

    def write_plan(self, plan: Plan, plan_md: str) -> None:
        self.store.write_plan(self.incident_id, plan, plan_md)
        self.plan = plan

    def write_attempt(self, attempt: Attempt) -> None:
        self.store.write_attempt(self.incident_id, attempt)
        self.attempts.append(attempt)

    def write_run_result(self, result: RunResult) -> None:
        self.store.write_run_result(self.incident_id, result)
        self.run_result = result

    def append_event(self, name: str, **data: Any) -> Event:
        record = self.store.append_event(self.incident_id, name, **data)
        self.events.append(record)
        return record

    def archive(self, bucket: str) -> None:
        self.store.archive(self.incident_id, bucket, held=(self.status, self.incident))
        self.bucket = self.status = bucket
        self.incident = dataclasses.replace(self.incident, status=bucket)

    def recover_events(self) -> None:
        """Append (``recovered: true``) the events a kill lost, so ``selfheal replay`` equals the disk (store lock held)."""
        records = list(self.events)
        for attempt in self.attempts:
            iteration = attempt.iteration
            if not has_event(records, ev.VERIFICATION_FINISHED, iteration=iteration):
                self.append_event(ev.VERIFICATION_FINISHED, recovered=True, **verification_event(attempt).data)
            repeats = attempt.decision.same_error_repeats if attempt.decision is not None else 0
            if repeats >= 2 and not has_event(records, ev.REPEATED_FAILURE_DETECTED, iteration=iteration):
                self.append_event(ev.REPEATED_FAILURE_DETECTED, recovered=True,
                                  **repeated_failure_event(attempt, repeats).data)
        logged = logged_status(records)
        if logged is not None and logged != self.status:
            self.append_event(ev.STATUS_CHANGED, **{"from": logged, "to": self.status, "recovered": True})


def logged_status(records: Sequence[Event]) -> Optional[str]:
    """The status the event log says the incident is in (None: no status event)."""
    status: Optional[str] = None
    for record in records:
        if record.event == ev.INCIDENT_CAPTURED:
            status = str(record.get("status") or IncidentStatus.NEW)
        elif record.event == ev.STATUS_CHANGED and isinstance(record.get("to"), str):
            status = str(record.get("to"))
    return status


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
    """The capture's diff hash: recorded, or a clean tree's at the commit ``context.json`` names; None: unknown."""
    if incident.diff_hash:
        return incident.diff_hash
    commit = context.git.clean_commit if context is not None and context.git is not None else None
    return clean_tree_hash(commit) if commit is not None else None


def capture_hash_on_disk(store: Store, incident_id: str, incident: Incident) -> Optional[str]:
    """:func:`capture_diff_hash`, reading ``context.json`` only when needed (a bad one never blocks the loop)."""
    return capture_diff_hash(incident, None if incident.diff_hash else read_context(store, incident_id))


def read_context(store: Store, incident_id: str) -> Optional[RunContext]:
    try:
        return store.read_context(incident_id)
    except SelfhealError:
        return None  # gone or unreadable: nothing to compare with (the judging records call it an edit)


def _decision_from_record(data: Decision) -> Decision:
    """A recorded decision, its missing keys filled in as the policy would have written them."""
    reason = data.stop_reason
    return dataclasses.replace(
        data, action=data.action or (policy.ACTION_STOP if reason else policy.ACTION_CONTINUE),
        final_status=data.final_status if data.final_status is not None else policy.final_status_of(reason),
        progress=bool(data.progress), fingerprint_changed=bool(data.fingerprint_changed),
        retry_timeout=bool(data.retry_timeout), message=data.message or f"Stopped: {reason}.",
        conditions=data.conditions or ((reason,) if reason else ()), keys=policy.DECISION_KEYS, extra=())


def pending_stop(attempts: Sequence[Attempt], run_result: Optional[RunResult], status: str,
                 replanned_at: Optional[int] = None, reopened: Optional[int] = None) -> Optional[Decision]:
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
