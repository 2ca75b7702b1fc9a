"""The loop state of one incident, held in memory for a whole loop run (docs/architecture.md "The loop state").

Read from the files once; from then on the loop writes *through* it (to the store and into
the state in the same step), so no step reads back what an earlier one wrote. The files stay
the record and the crash recovery.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from pytest_selfheal.loop import policy
from pytest_selfheal.loop.resume import (
    capture_hash_on_disk,
    has_event,
    observations_of,
    pending_stop,
    repeated_failure_event,
    split_runs,
    verification_event,
)
from pytest_selfheal.records.attempt import Attempt, Decision
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.vocab import IncidentStatus
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

    # ------------------------------------------------------------------ reading

    @classmethod
    def read(cls, store: Store, incident_id: str, incident: Optional[Incident] = None,
             plan: Optional[Plan] = None) -> LoopRun:
        """The state from the files, each read once; ``incident``, ``plan``: as the caller
        already read them."""
        records = read_records(store, incident_id)
        incident = incident or store.read_incident(records.incident_id)
        return cls(
            store=store,
            incident=incident,
            bucket=records.bucket,
            status=records.status,
            plan=plan if plan is not None else store.read_plan(incident.incident_id) if store.has_plan(
                incident.incident_id) else None,
            attempts=records.attempts,
            run_result=records.run_result,
            events=store.read_events(incident.incident_id)[0],
            capture_hash=capture_hash_on_disk(store, incident.incident_id, incident),
        )

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

    # ------------------------------------------------------------------ derived

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
        return observations_of(self.incident, self.attempts, capture_hash=self.capture_hash)

    def pending(self) -> Optional[Decision]:
        replanned_at = self.plan.replanned_at_iteration if self.plan is not None else None
        return pending_stop(self.attempts, self.run_result, self.status, replanned_at,
                            policy.stop_history_after(self.incident))

    # ------------------------------------------------------------------ writing through

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

    # ------------------------------------------------------------------ crash recovery

    def recover_events(self) -> None:
        """Append (``recovered: true``) the events a kill between a file and its log line lost,
        so ``selfheal replay`` equals the disk. Call under the store lock."""
        records = list(self.events)
        for attempt in self.attempts:
            iteration = attempt.iteration
            if not has_event(records, ev.VERIFICATION_FINISHED, iteration=iteration):
                self.append_event(ev.VERIFICATION_FINISHED, recovered=True, **verification_event(attempt).data)
            repeats = attempt.decision.same_error_repeats if attempt.decision is not None else 0
            if repeats >= 2 and not has_event(records, ev.REPEATED_FAILURE_DETECTED, iteration=iteration):
                self.append_event(ev.REPEATED_FAILURE_DETECTED, recovered=True,
                                  **repeated_failure_event(attempt, repeats).data)
        logged = _logged_status(records)
        if logged is not None and logged != self.status:
            self.append_event(ev.STATUS_CHANGED, **{"from": logged, "to": self.status, "recovered": True})


def _logged_status(records: list[Event]) -> Optional[str]:
    status: Optional[str] = None
    for record in records:
        if record.event == ev.INCIDENT_CAPTURED:
            status = str(record.get("status") or IncidentStatus.NEW)
        elif record.event == ev.STATUS_CHANGED and isinstance(record.get("to"), str):
            status = str(record.get("to"))
    return status
