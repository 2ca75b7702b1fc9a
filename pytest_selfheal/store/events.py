"""Incident events, one JSON object a line of ``audit_tail.jsonl``: ``{"ts", "event",
"incident_id", ...data}``; names, building, encoding and tolerant parsing. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from pytest_selfheal.errors import InputError
from pytest_selfheal.records.jsondoc import JsonRecord, plain_json
from pytest_selfheal.store.ids import utc

# The contract's event names, in the order of an incident's life.
SPEC_EVENTS: tuple[str, ...] = (
    INCIDENT_CAPTURED := "incident_captured",
    FAILURE_CLASSIFIED := "failure_classified",
    PLAN_GENERATED := "plan_generated",
    REPAIR_ATTEMPT_STARTED := "repair_attempt_started",
    DIFF_PROPOSED := "diff_proposed",
    SCOPE_EXPANSION_REQUESTED := "scope_expansion_requested",
    REPAIR_ATTEMPT_COMPLETED := "repair_attempt_completed",
    VERIFICATION_FINISHED := "verification_finished",
    REPEATED_FAILURE_DETECTED := "repeated_failure_detected",
    DECISION_POINT_NEEDED := "decision_point_needed",
    LOOP_STOPPED := "loop_stopped",
    INCIDENT_ARCHIVED := "incident_archived",
    INCIDENT_REOPENED := "incident_reopened",  # `selfheal reopen ID` brings an archived incident back
)
EVENT_NAMES: tuple[str, ...] = SPEC_EVENTS + (
    STATUS_CHANGED := "status_changed",  # written by Store.set_status, so that replay can follow status changes
    CAPTURE_ATTACHED := "capture_attached",  # a later run saw the failures of this stopped incident again
)

RESERVED_KEYS: tuple[str, ...] = ("ts", "event", "incident_id")


@dataclass(frozen=True)
class Event(JsonRecord):
    """One event of an incident's log."""

    event: str  # one of store.events.EVENT_NAMES (unknown names are kept: logs outlive versions)
    ts: Optional[str] = None  # ISO-8601 UTC with microseconds
    incident_id: Optional[str] = None

    @property
    def data(self) -> dict[str, Any]:
        """The event's data (every key but ``ts``, ``event`` and ``incident_id``) as plain JSON."""
        return {key: plain_json(value) for key, value in self.extra}

    def get(self, key: str, default: Any = None) -> Any:
        """One data value as plain JSON, or ``default``."""
        return self.data.get(key, default)


def format_ts(moment: Optional[datetime] = None, timespec: str = "seconds") -> str:
    """ISO-8601 in UTC with an explicit ``+00:00`` offset (a naive datetime is taken as UTC)."""
    return utc(moment).isoformat(timespec=timespec)


def pending(name: str, data: Optional[Mapping[str, object]] = None) -> Event:
    """An event to log, without the ``ts`` and ``incident_id`` the store stamps on it when it
    writes it. An unknown ``name`` or a reserved data key is a bug of the caller (``ValueError``)."""
    if name not in EVENT_NAMES:
        raise ValueError(f"unknown event name {name!r} (expected one of {', '.join(EVENT_NAMES)})")
    payload = dict(data or {})
    clash = [key for key in RESERVED_KEYS if key in payload]
    if clash:
        raise ValueError(f"event data must not set {', '.join(clash)}")
    return Event.from_json({"event": name, **payload}, "event")


def stamp(event: Event, incident_id: str, *, ts: Optional[datetime] = None) -> Event:
    """``event`` (a :func:`pending` one) as logged: with its time (now by default) and incident id."""
    return Event.from_json({"ts": format_ts(ts, "microseconds"), "event": event.event, "incident_id": incident_id,
                            **event.data}, "event")


def encode_event(event: Event) -> str:
    return encode_line(event.to_json())


def encode_line(doc: object) -> str:
    """One JSON line of the log (json.dumps escapes newlines inside strings), keys sorted."""
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def since_last(events: list[Event], name: str = INCIDENT_REOPENED) -> list[Event]:
    """The events after the last ``name`` (all of them without one): what a close-out, an
    archive or a reopen checks for "already done"."""
    last = max((i for i, e in enumerate(events) if e.event == name), default=-1)
    return events[last + 1:]


def parse_events(text: str, source: str = "audit_tail.jsonl") -> tuple[list[Event], list[str]]:
    """``(events, warnings)`` of a JSONL event log: a torn last line (a writer killed
    mid-append) or any other bad line is skipped and named in ``warnings``, never raised."""
    events: list[Event] = []
    warnings: list[str] = []
    lines = text.split("\n")
    complete = text.endswith("\n")
    for index, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = index == len(lines) and not complete
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            kind = "torn last line" if torn else "corrupted line"
            warnings.append(f"{source} line {index}: {kind} skipped ({reason})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("event"), str):
            warnings.append(f"{source} line {index}: not an event object, skipped")
            continue
        try:
            events.append(Event.from_json(record, f"{source} line {index}"))
        except InputError as exc:
            warnings.append(f"{exc.message}, skipped")
    return events, warnings
