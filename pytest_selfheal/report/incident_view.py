"""One incident as the user reads it (edge): the view ``selfheal show`` and the MCP ``show`` tool render."""

from __future__ import annotations

from typing import Optional

from pytest_selfheal.loop.policy import result_in_force
from pytest_selfheal.plan.build import group_failures
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.records.plan import Plan, PlanAction
from pytest_selfheal.store.root import Store


def root_causes(incident: Incident, plan: Optional[Plan]) -> tuple[PlanAction, ...]:
    """The failures grouped by root cause: the plan's actions, or the same grouping without a plan."""
    if plan is not None and plan.actions:
        return plan.actions
    return tuple(
        PlanAction(id="", title="", priority="", risk="", target_paths=(), verification=(), root_cause=group.key(),
                   signature=group.members[0].signature or None, nodeids=tuple(m.nodeid or m.test for m in group.members))
        for group in group_failures(incident.failures)
    )


def incident_view(store: Store, incident_id: str) -> IncidentView:
    """One incident as records (errors raised: 2 bad id, 3 corrupted files, 4 unknown id)."""
    bucket, folder = store.locate(incident_id)
    incident = store.read_incident(incident_id)
    status = store.read_status(incident_id)
    plan = store.read_plan(incident_id) if store.has_plan(incident_id) else None
    attempts = store.read_attempts(incident_id)
    events, warnings = store.read_events(incident_id)
    return IncidentView(
        incident_id=incident_id, status=status, bucket=bucket, path=folder.relative_to(store.root).as_posix(),
        incident=incident, root_causes=root_causes(incident, plan), plan=plan, attempts=tuple(attempts),
        run_result=result_in_force(store.read_run_result(incident_id), attempts, incident, status),
        events=len(events), warnings=tuple(warnings),
    )
