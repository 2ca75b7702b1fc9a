"""The loop state of one incident, held in memory for a whole loop run (docs/architecture.md "The loop state").

:meth:`LoopRun.resume` reads it from the files once — when a loop run starts, or resumes
after a crash — and first appends the events a kill may have lost between a file and its
log line. From then on the loop writes *through* it: every status move, plan, attempt,
run result, archive and event goes to the store and into this state in the same step, so
no step reads back what an earlier one wrote, and the event log is written from the same
writes instead of being a second truth to reconcile.

The files stay the record and the crash recovery: :meth:`LoopRun.read` is the one way to
rebuild the state from them (the loop's start and resume), over :func:`read_records`,
which ``selfheal replay``'s disk side reads too (it must still answer when ``incident.json``
or ``plan.json`` is unreadable).
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
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.event import Event
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.vocab import IncidentStatus
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store


@dataclass(frozen=True)
class RunRecords:
    """The records of a loop run that every view of its state reads: where the incident
    folder is, ``status.txt``, the attempts and ``run_result.json``."""

    incident_id: str
    bucket: str
    status: str
    attempts: list[Attempt]
    run_result: Optional[RunResult]


def read_records(store: Store, incident_id: str) -> RunRecords:
    """:class:`RunRecords` from the files (the loop state's read, and ``selfheal replay``'s,
    which needs no more of the incident). Raises like the store (corrupted files: exit 3)."""
    incident_id = validate_incident_id(incident_id)
    bucket, _ = store.locate(incident_id)
    return RunRecords(incident_id, bucket, store.read_status(incident_id), store.read_attempts(incident_id),
                      store.read_run_result(incident_id))


@dataclass
class LoopRun:
    """One incident's loop state: what its files say, kept current by writing through it.

    ``events`` are the log as read plus the events appended through :meth:`append_event`
    (what the close-out checks to stay idempotent); the other lines of the log — a status
    move's ``status_changed``, a repair provider's events — are the store's alone.
    """

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
        """The state from the files of ``incident_id``, each read once (call under the store
        lock when it is to be acted on). ``incident``, ``plan``: the records as the caller
        already read them, not read again. Raises like the store (corrupted files: exit 3)."""
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
        """:meth:`read` under the store lock, then, for an open incident, the events a kill
        lost appended (:meth:`recover_events`)."""
        with store.lock():
            run = cls.read(store, incident_id, incident, plan)
            if run.bucket == INBOX:
                run.recover_events()
            return run

    def refresh(self) -> None:
        """Read the files again when they moved on without this state — another process
        recorded an attempt or moved the folder (an embedding without the loop lock).
        Call under the store lock."""
        bucket, _ = self.store.locate(self.incident_id)
        if bucket == self.bucket and self.store.next_attempt_number(self.incident_id) == self.next_iteration:
            return
        fresh = LoopRun.resume(self.store, self.incident_id)
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(fresh, field.name))

    # ------------------------------------------------------------------ derived

    @property
    def incident_id(self) -> str:
        """The incident's id."""
        return self.incident.incident_id

    @property
    def reopened(self) -> Optional[int]:
        """The attempt after which ``selfheal reopen`` started a new loop run (:func:`policy.reopened_after`)."""
        return policy.reopened_after(self.incident)

    @property
    def next_iteration(self) -> int:
        """The number the next attempt gets."""
        return self.attempts[-1].iteration + 1 if self.attempts else 1

    def split(self) -> tuple[Optional[Attempt], list[Attempt]]:
        """``(baseline attempt or None, attempts of the current loop run)`` (:func:`~pytest_selfheal.loop.resume.split_runs`)."""
        return split_runs(self.attempts, self.reopened)

    def require_plan(self) -> Plan:
        """The plan; the store's own error (``NotFoundError``) when the incident has none."""
        return self.plan if self.plan is not None else self.store.read_plan(self.incident_id)

    def observations(self) -> list[policy.Observation]:
        """The observations of the current loop run: observation 0, then one per attempt."""
        return observations_of(self.incident, self.attempts, capture_hash=self.capture_hash)

    def pending(self) -> Optional[policy.Decision]:
        """A recorded stop whose close-out has not completed (:func:`~pytest_selfheal.loop.resume.pending_stop`), or None."""
        replanned_at = self.plan.replanned_at_iteration if self.plan is not None else None
        return pending_stop(self.attempts, self.run_result, self.status, replanned_at,
                            policy.stop_history_after(self.incident))

    # ------------------------------------------------------------------ writing through

    def set_status(self, new: str, **data: Any) -> None:
        """``Store.set_status``, and the state's status with it."""
        self.incident = self.store.set_status(self.incident_id, new, held=(self.status, self.incident), **data)
        self.status = new

    def write_plan(self, plan: Plan, plan_md: str) -> None:
        """``Store.write_plan``, and the state's plan with it."""
        self.store.write_plan(self.incident_id, plan, plan_md)
        self.plan = plan

    def write_attempt(self, attempt: Attempt) -> None:
        """``Store.write_attempt`` (never over an existing one), and the state's attempts with it."""
        self.store.write_attempt(self.incident_id, attempt)
        self.attempts.append(attempt)

    def write_run_result(self, result: RunResult) -> None:
        """``Store.write_run_result``, and the state's run result with it."""
        self.store.write_run_result(self.incident_id, result)
        self.run_result = result

    def append_event(self, name: str, **data: Any) -> Event:
        """``Store.append_event``, and the state's events with it; returns the record."""
        record = self.store.append_event(self.incident_id, name, **data)
        self.events.append(record)
        return record

    def archive(self, bucket: str) -> None:
        """``Store.archive`` (the status move, its events and the folder's rename), and the state with it."""
        self.store.archive(self.incident_id, bucket, held=(self.status, self.incident))
        self.bucket = self.status = bucket
        self.incident = dataclasses.replace(self.incident, status=bucket)

    # ------------------------------------------------------------------ crash recovery

    def recover_events(self) -> int:
        """Append the events a kill may have lost; returns how many were added. Call under the store lock.

        A kill between ``attempt_XX.json`` and its ``verification_finished`` (or
        ``repeated_failure_detected``) line, or between ``status.txt`` and its
        ``status_changed`` line, would leave the event log behind the files; the missing
        records are appended (marked ``recovered: true``) so ``selfheal replay`` equals the disk.
        """
        records = list(self.events)
        added = 0
        for attempt in self.attempts:
            iteration = attempt.iteration
            if not has_event(records, ev.VERIFICATION_FINISHED, iteration=iteration):
                self.append_event(ev.VERIFICATION_FINISHED, recovered=True, **verification_event(attempt).data)
                added += 1
            repeats = attempt.decision.same_error_repeats if attempt.decision is not None else 0
            if repeats >= 2 and not has_event(records, ev.REPEATED_FAILURE_DETECTED, iteration=iteration):
                self.append_event(ev.REPEATED_FAILURE_DETECTED, recovered=True,
                                  **repeated_failure_event(attempt, repeats).data)
                added += 1
        logged = _logged_status(records)
        if logged is not None and logged != self.status:
            self.append_event(ev.STATUS_CHANGED, **{"from": logged, "to": self.status, "recovered": True})
            added += 1
        return added


def _logged_status(records: list[Event]) -> Optional[str]:
    """The status the event log says the incident is in, None when it says nothing."""
    status: Optional[str] = None
    for record in records:
        if record.event == ev.INCIDENT_CAPTURED:
            status = str(record.get("status") or IncidentStatus.NEW)
        elif record.event == ev.STATUS_CHANGED and isinstance(record.get("to"), str):
            status = str(record.get("to"))
    return status
