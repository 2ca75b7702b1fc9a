"""One row of ``Store.list_incidents()``: ``IncidentSummary`` (docs/store.md). Pure.

Its JSON (``to_json``) is what ``selfheal status --json`` prints: every field in this
order, ``null`` when unknown, and ``error`` only for a corrupted incident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.jsondoc import Extra, Field, JsonRecord, integer, nullable, string

# The status of a listed incident whose files cannot be read (``error`` says why).
CORRUPTED = "corrupted"


@dataclass(frozen=True)
class IncidentSummary(JsonRecord):
    """An incident as listed: where it is, its status and what its files say of it."""

    KIND: ClassVar[str] = "incident summary"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("incident_id", string, required=True),
        Field("status", string, required=True),
        Field("bucket", string, required=True),
        Field("error_signature", nullable(string), required=True),
        Field("created_at", nullable(string), required=True),
        Field("updated_at", nullable(string), required=True),
        Field("step", nullable(string), required=True),
        Field("attempts", integer, required=True),
        Field("path", string, required=True),
        Field("error", string),
    )

    incident_id: str
    status: str  # status.txt (an IncidentStatus), or CORRUPTED
    bucket: str  # inbox, resolved or escalated
    path: str  # the incident's folder, relative to the reports root
    error_signature: Optional[str] = None
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    step: Optional[str] = None
    attempts: int = 0  # attempt files on disk
    error: Optional[str] = None  # a corrupted incident: what is wrong with it
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()

    @property
    def corrupted(self) -> bool:
        """True when the incident's files could not be read (``error`` says why)."""
        return self.status == CORRUPTED


__all__ = ["CORRUPTED", "IncidentSummary"]
