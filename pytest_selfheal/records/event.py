"""One line of ``audit_tail.jsonl`` as a record: ``Event`` (docs/store.md, ``store/events.py``). Pure.

The three reserved keys are typed fields; the rest is the event's data, kept in ``extra``.
Only ``event`` is required: a reader skips a line without it with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from pytest_selfheal.records.jsondoc import JsonRecord, plain_json


@dataclass(frozen=True)
class Event(JsonRecord):
    """One event of an incident's log."""

    KIND: ClassVar[str] = "event"

    event: str  # one of store.events.EVENT_NAMES (unknown names are kept: logs outlive versions)
    ts: Optional[str] = None  # ISO-8601 UTC with microseconds
    incident_id: Optional[str] = None

    @property
    def data(self) -> dict[str, Any]:
        """The event's data (every key but ``ts``, ``event`` and ``incident_id``) as plain JSON."""
        return {key: plain_json(value) for key, value in self.extra}

    def get(self, key: str, default: Any = None) -> Any:
        """One data value as plain JSON, or ``default``."""
        for name, value in self.extra:
            if name == key:
                return plain_json(value)
        return default
