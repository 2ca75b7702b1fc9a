"""One incident as the user reads it (edge: reads the store): fields, status, failures grouped
by root cause, plan summary, attempts, run result. ``selfheal show`` and the MCP server's
``show`` tool both render this view: an ``IncidentView`` (records/report.py), JSON only in
its ``to_json`` (``selfheal show --json``)."""

from __future__ import annotations

from typing import Optional

from pytest_selfheal.loop.policy import result_in_force
from pytest_selfheal.plan.build import group_failures
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.incident_view import CauseGroup, IncidentView, PlanSummary
from pytest_selfheal.records.plan import Plan, PlanAction
from pytest_selfheal.store.root import Store


def _action_group(action: PlanAction) -> CauseGroup:
    cause = action.root_cause
    return CauseGroup(
        action=action.id, evidence=cause.evidence if cause is not None else "fingerprint",
        path=cause.path if cause is not None else None, name=cause.name if cause is not None else None,
        signature=action.signature, nodeids=action.nodeids, target_paths=action.target_paths,
        test_paths=action.test_paths, where=action.where, assertion=action.assertion,
        suspects=tuple(f"{s.name} ({s.where}, {s.evidence}, {s.score:.2f})" for s in action.suspects),
        excerpt=action.excerpt.numbered() if action.excerpt is not None else None,
        also_where=action.also_where,
        also_excerpt=action.also_excerpt.numbered() if action.also_excerpt is not None else None,
    )


def root_causes(incident: Incident, plan: Optional[Plan]) -> tuple[CauseGroup, ...]:
    """The incident's failures grouped by root cause: the plan's actions (which hold the
    grouping, docs/loop.md "The plan"), or the same grouping computed when there is no plan."""
    if plan is not None and plan.actions:
        return tuple(_action_group(action) for action in plan.actions)
    return tuple(
        CauseGroup(action=None, evidence=group.evidence, path=group.path, name=group.name,
                   signature=group.members[0].signature or None,
                   nodeids=tuple(m.nodeid or m.test for m in group.members), from_plan=False)
        for group in group_failures(incident.failures)
    )


def incident_view(store: Store, incident_id: str) -> IncidentView:
    """One incident as records: what ``selfheal show`` prints and the MCP ``show`` tool
    digests (errors are raised, not hidden: 2 bad id, 3 corrupted files, 4 unknown id)."""
    bucket, folder = store.locate(incident_id)
    incident = store.read_incident(incident_id)
    status = store.read_status(incident_id)
    plan: Optional[PlanSummary] = None
    doc: Optional[Plan] = None
    if store.has_plan(incident_id):
        doc = store.read_plan(incident_id)
        plan = PlanSummary(
            generated_at=doc.generated_at, summary=doc.summary,
            actions=tuple((a.id, a.title) for a in doc.actions),
            verification_commands=tuple(doc.verification_commands),
            path=store.plans_dir(incident_id).relative_to(store.root).as_posix(),
        )
    attempts = store.read_attempts(incident_id)
    events, warnings = store.read_events(incident_id)
    return IncidentView(
        incident_id=incident_id, status=status, bucket=bucket, path=folder.relative_to(store.root).as_posix(),
        incident=incident, root_causes=root_causes(incident, doc), plan=plan, attempts=tuple(attempts),
        run_result=result_in_force(store.read_run_result(incident_id), attempts, incident, status),
        events=len(events), warnings=tuple(warnings),
    )
