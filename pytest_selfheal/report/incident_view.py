"""One incident as the user reads it (edge: reads the store): fields, status, failures grouped
by root cause, plan summary, attempts, run result. ``selfheal show`` and the MCP server's
``show`` tool both render this view."""

from __future__ import annotations

from typing import Any, Optional

from pytest_selfheal.plan.build import group_failures
from pytest_selfheal.records.jsondoc import FieldError
from pytest_selfheal.records.plan import Plan, PlanAction
from pytest_selfheal.store.root import Store


def root_causes(incident: dict[str, Any], plan: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """The incident's failures grouped by root cause: the plan's actions (which hold the
    grouping, docs/loop.md "The plan"), or the same grouping computed when there is no plan."""
    out: list[dict[str, Any]] = []
    actions = plan.get("actions") if plan is not None else None
    if isinstance(actions, list) and actions:
        for action in actions:
            cause = action.get("root_cause") or {}
            out.append({
                "action": action.get("id"),
                "evidence": cause.get("evidence", "fingerprint"),
                "path": cause.get("path"),
                "name": cause.get("name"),
                "signature": action.get("signature"),
                "target_paths": list(action.get("target_paths") or []),
                "test_paths": list(action.get("test_paths") or []),
                "nodeids": list(action.get("nodeids") or []),
                **where_of(action),
            })
        return out
    failures = [f for f in incident.get("failures") or [] if isinstance(f, dict)]
    for group in group_failures(failures):
        out.append({
            "action": None, **group.to_json(),
            "signature": group.members[0].get("signature"),
            "target_paths": [], "test_paths": [],
            "nodeids": [str(m.get("nodeid") or m.get("test")) for m in group.members],
        })
    return out


def where_of(action: dict[str, Any]) -> dict[str, Any]:
    """The action's *where* for a reader: ``where`` (the top suspect's ``path:line``),
    ``assertion``, ``suspects`` (``name (path:line, score)``) and ``excerpt`` (numbered code
    lines), each only when the plan has it."""
    out: dict[str, Any] = {}
    try:
        record = PlanAction.parse(action, "action")
    except FieldError:  # a hand-edited plan: the rest of the view still shows
        return out
    if record.where:
        out["where"] = record.where
    if record.assertion:
        out["assertion"] = record.assertion
    if record.suspects:
        out["suspects"] = [f"{s.name} ({s.where}, {s.evidence}, {s.score:.2f})" for s in record.suspects]
    if record.excerpt is not None:
        out["excerpt"] = list(record.excerpt.numbered())
    return out


def incident_view(store: Store, incident_id: str) -> dict[str, Any]:
    """One incident as one JSON-friendly dict: what ``selfheal show`` prints and the MCP ``show`` tool
    digests (errors are raised, not hidden: 2 bad id, 3 corrupted files, 4 unknown id)."""
    bucket, folder = store.locate(incident_id)
    incident = store.read_incident(incident_id)
    status = store.read_status(incident_id)
    plan: Optional[dict[str, Any]] = None
    doc: Optional[Plan] = None
    if store.has_plan(incident_id):
        doc = store.read_plan(incident_id)
        plan = {
            "generated_at": doc.generated_at,
            "summary": doc.summary,
            "actions": [{"id": a.id, "title": a.title} for a in doc.actions],
            "verification_commands": list(doc.verification_commands),
            "path": store.plans_dir(incident_id).relative_to(store.root).as_posix(),
        }
    attempts = store.read_attempts(incident_id)
    events, warnings = store.read_events(incident_id)
    run_result = store.read_run_result(incident_id)
    return {
        "incident_id": incident_id,
        "status": status,
        "bucket": bucket,
        "path": folder.relative_to(store.root).as_posix(),
        "incident": incident.to_json(),
        "root_causes": root_causes(incident.to_json(), doc.to_json() if doc is not None else None),
        "plan": plan,
        "attempts": len(attempts),
        "attempt_results": [
            {
                "iteration": a.iteration,
                "result": a.result,
                "verification_passed": a.verification_passed,
                "stop_reason": a.stop_reason,
                "error_signature": a.error_signature,
            }
            for a in attempts
        ],
        "run_result": run_result.to_json() if run_result is not None else None,
        "events": len(events),
        "warnings": warnings,
    }
