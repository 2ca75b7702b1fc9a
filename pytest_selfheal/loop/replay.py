"""Rebuild the loop state from the event log alone (:func:`replay`, pure), and the same state
from the files (:func:`state_from_disk`): ``selfheal replay ID`` compares the two (docs/loop.md
"Replay"); equal means the event log tells the whole story of the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union

from pytest_selfheal.errors import InputError
from pytest_selfheal.loop.policy import final_status_of, stop_history_after, stop_is_history
from pytest_selfheal.loop.state import LoopRun, RunRecords, logged_status, read_records, verification_event
from pytest_selfheal.names import archived_path
from pytest_selfheal.records.loop_state import COMPARED_KEYS, LoopState, ReplayIteration, ReplayStop
from pytest_selfheal.store.events import (
    INCIDENT_ARCHIVED,
    INCIDENT_REOPENED,
    LOOP_STOPPED,
    VERIFICATION_FINISHED,
    Event,
)
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store


def _iteration_entry(record: Event) -> ReplayIteration:
    fingerprints = record.get("fingerprints")
    return ReplayIteration(
        iteration=record.get("iteration"), verification_passed=bool(record.get("verification_passed", False)),
        fingerprints=tuple(str(f) for f in fingerprints) if isinstance(fingerprints, list) else (),
        result=record.get("result"), stop_reason=record.get("stop_reason"))


def _stop_in_force(
    iterations: Sequence[ReplayIteration], closing: Optional[ReplayStop], status: Optional[str], reopened: Optional[int]
) -> Optional[str]:
    last = iterations[-1].iteration if iterations else 0
    if stop_is_history(reopened, last, status):
        return None  # reopened and not stopped since: the old stop is history, not in force
    if closing is not None and closing.iteration == last and closing.stop_reason:
        return str(closing.stop_reason)
    if iterations and iterations[-1].result == "stop":
        reason = iterations[-1].stop_reason
        return str(reason) if reason else None
    return None


def _state(incident_id: Optional[str], status: Optional[str], bucket: str, iterations: Sequence[ReplayIteration],
           closing: Optional[ReplayStop], archived_to: Optional[str], reopened: Optional[int] = None,
           stops: Optional[Sequence[ReplayStop]] = None) -> LoopState:
    """The compared state; with ``stops`` (the replay's), ``loop_stops`` too."""
    stop_reason = _stop_in_force(iterations, closing, status, reopened)
    return LoopState(
        incident_id=incident_id, status=status, bucket=bucket, iterations=tuple(iterations), stop_reason=stop_reason,
        final_status=final_status_of(stop_reason), archived_to=archived_to, loop_stops=tuple(stops or ()),
        keys=COMPARED_KEYS if stops is None else (*COMPARED_KEYS, "loop_stops"))


def replay(events: Sequence[Event]) -> LoopState:
    """The loop state rebuilt from the events alone; ``loop_stops`` lists every stop the log
    holds (not compared). The last record of an iteration number wins."""
    incident_id: Optional[str] = None
    bucket = INBOX
    archived_to: Optional[str] = None
    by_number: dict[int, ReplayIteration] = {}
    closing: Optional[ReplayStop] = None
    reopened: Optional[int] = None
    stops: list[ReplayStop] = []
    for record in events:
        name = record.event
        if incident_id is None and record.incident_id is not None:
            incident_id = record.incident_id
        if name == INCIDENT_ARCHIVED:
            bucket = str(record.get("bucket") or bucket)
            archived_to = record.get("archived_to") if isinstance(record.get("archived_to"), str) else archived_to
        elif name == INCIDENT_REOPENED:
            bucket, archived_to, closing = INBOX, None, None
            after = record.get("after_iteration")
            reopened = after if isinstance(after, int) and not isinstance(after, bool) else reopened
        elif name == VERIFICATION_FINISHED:
            number = record.get("iteration")
            if isinstance(number, int) and not isinstance(number, bool):
                by_number[number] = _iteration_entry(record)
        elif name == LOOP_STOPPED:
            stop = ReplayStop(record.get("iteration"), record.get("stop_reason"), record.get("final_status"))
            stops.append(stop)
            if stop.final_status:
                closing = stop
    iterations = [by_number[k] for k in sorted(by_number)]
    return _state(incident_id, logged_status(events), bucket, iterations, closing, archived_to, reopened, stops)


def state_from_disk(store: Store, incident_id: str) -> LoopState:
    """The same state built from the files, as the loop reads them."""
    records = read_records(store, incident_id)
    try:
        reopened = stop_history_after(store.read_incident(records.incident_id))
    except InputError:
        reopened = None  # replay does not need the rest of incident.json: a bad one is `show`'s to report
    return _disk_state(records, reopened)


def disk_state(run: LoopRun) -> LoopState:
    """The compared state of a loop state held in memory (what its files say)."""
    return _disk_state(run, stop_history_after(run.incident))


def _disk_state(records: Union[RunRecords, LoopRun], reopened: Optional[int]) -> LoopState:
    # The data each attempt's verification_finished event holds: the same entry as the replay's.
    iterations = [_iteration_entry(verification_event(attempt)) for attempt in records.attempts]
    result = records.run_result
    closing = ReplayStop(result.iteration, result.stop_reason) if result is not None else None
    archived_to = archived_path(records.bucket, records.incident_id) if records.bucket != INBOX else None
    return _state(records.incident_id, records.status, records.bucket, iterations, closing, archived_to, reopened)


def differences(replayed: LoopState, disk: LoopState) -> list[str]:
    """One line per compared key that differs (empty: replay equals the disk), its values as JSON."""
    events, files = replayed.to_json(), disk.to_json()
    lines = []
    for key in COMPARED_KEYS:
        if events.get(key) != files.get(key):
            lines.append(f"{key}: events say {events.get(key)!r}, files say {files.get(key)!r}")
    return lines
