"""One row of ``Store.list_incidents()``, as ``selfheal status --json`` prints it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Optional

from pytest_selfheal.records.jsondoc import REQUIRED, JsonRecord

# The status of a listed incident whose files cannot be read (``error`` says why).
CORRUPTED = "corrupted"


@dataclass(frozen=True, kw_only=True)
class IncidentSummary(JsonRecord):
    """An incident as listed: where it is, its status and what its files say of it."""

    KIND: ClassVar[str] = "incident summary"

    incident_id: str
    status: str  # status.txt (an IncidentStatus), or CORRUPTED
    bucket: str  # inbox, resolved or escalated
    error_signature: Annotated[Optional[str], REQUIRED] = None
    created_at: Annotated[Optional[str], REQUIRED] = None
    updated_at: Annotated[Optional[str], REQUIRED] = None
    step: Annotated[Optional[str], REQUIRED] = None
    attempts: Annotated[int, REQUIRED] = 0  # attempt files on disk
    path: str  # the incident's folder, relative to the reports root
    error: Optional[str] = None  # a corrupted incident: what is wrong with it

    @property
    def corrupted(self) -> bool:
        return self.status == CORRUPTED
