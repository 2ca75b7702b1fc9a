"""One incident as the user reads it (edge): the view ``selfheal show`` and the MCP ``show`` tool render."""

from __future__ import annotations

from typing import Optional

from pytest_selfheal.plan.build import group_failures
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.records.plan import Plan, PlanAction
from pytest_selfheal.report.load import load_incident_run
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
    """One incident as records, from the files the report reads (errors raised: 2 bad id, 3
    corrupted files, 4 unknown id); its status is ``status.txt``'s, the incident's included."""
    run = load_incident_run(store, incident_id)
    events, warnings = store.read_events(incident_id)
    return IncidentView(
        incident_id=incident_id, status=run.incident.status, bucket=run.bucket,
        path=store.locate(incident_id)[1].relative_to(store.root).as_posix(), incident=run.incident,
        root_causes=root_causes(run.incident, run.plan), plan=run.plan, attempts=tuple(run.attempts),
        run_result=run.run_result, events=len(events), warnings=tuple(warnings),
    )
