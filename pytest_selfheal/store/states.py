"""Incident status transitions (pure; the table is documented in docs/store.md).

Every allowed move is listed below; everything else, a move to the same status included,
is refused.
"""

from __future__ import annotations

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.records.vocab import IncidentStatus

STATUSES: tuple[IncidentStatus, ...] = tuple(IncidentStatus)

# Terminal statuses are also the archive buckets: error_archive/<status>/<incident_id>/.
TERMINAL: tuple[IncidentStatus, ...] = (IncidentStatus.RESOLVED, IncidentStatus.ESCALATED)
ARCHIVE_BUCKETS: tuple[IncidentStatus, ...] = TERMINAL

TRANSITIONS: dict[str, frozenset[IncidentStatus]] = {
    # A plan is generated; or a human gives up before planning (archive --as escalated).
    IncidentStatus.NEW: frozenset({IncidentStatus.PLANNED, IncidentStatus.ESCALATED}),
    # The loop starts; or a human gives up before any run.
    IncidentStatus.PLANNED: frozenset({IncidentStatus.RUNNING, IncidentStatus.ESCALATED}),
    # Only a run that verified can resolve; it may also escalate or request a replan.
    IncidentStatus.RUNNING: frozenset({IncidentStatus.RESOLVED, IncidentStatus.ESCALATED, IncidentStatus.PLAN_PROPOSED}),
    # The regenerated plan is written; or a human gives up instead of replanning.
    IncidentStatus.PLAN_PROPOSED: frozenset({IncidentStatus.PLANNED, IncidentStatus.ESCALATED}),
    # Archived: final.
    IncidentStatus.RESOLVED: frozenset(),
    IncidentStatus.ESCALATED: frozenset(),
}


def _check_known(status: str) -> None:
    if status not in TRANSITIONS:
        raise ValueError(f"unknown incident status {status!r} (expected one of {', '.join(STATUSES)})")


def allowed_targets(status: str) -> tuple[str, ...]:
    """Statuses reachable from ``status`` in one move, in ``STATUSES`` order."""
    _check_known(status)
    return tuple(s for s in STATUSES if s in TRANSITIONS[status])


def can_transition(current: str, new: str) -> bool:
    """True when the table allows ``current -> new``; unknown statuses raise ``ValueError``."""
    _check_known(current)
    _check_known(new)
    return new in TRANSITIONS[current]


def check_transition(incident_id: str, current: str, new: str) -> None:
    """Raise a one-line ``RefusedError`` unless ``current -> new`` is allowed."""
    if can_transition(current, new):
        return
    allowed = ", ".join(allowed_targets(current)) or "none, it is final"
    raise RefusedError(f"cannot move incident {incident_id} from {current} to {new} (allowed from {current}: {allowed})")
