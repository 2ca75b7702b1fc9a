"""``selfheal show ID``: one incident — its fields, status, plan, attempts and run result."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Optional, Tuple

from pytest_selfheal.cli.commands._common import (
    ID_HELP,
    add_dir_argument,
    incident_id_from_args,
    print_json,
    store_from_args,
)
from pytest_selfheal.store.root import Store

NAME = "show"
HELP = "show one incident: fields, status, plan summary, attempts, run result"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ID [--json] [--dir DIR]``."""
    parser.add_argument("incident_id", metavar="ID", help=ID_HELP)
    parser.add_argument("--json", action="store_true", help="print the incident as JSON")
    add_dir_argument(parser)


def collect(store: "Store", incident_id: str) -> Dict[str, Any]:
    """Everything ``show`` prints, as one JSON-friendly dict (errors are raised, not hidden)."""
    bucket, folder = store.locate(incident_id)
    incident = store.read_incident(incident_id)
    status = store.read_status(incident_id)
    plan: Optional[Dict[str, Any]] = None
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


def _flat(value: Any) -> str:
    return " ".join(str("-" if value is None else value).split())


def format_text(data: Dict[str, Any]) -> str:
    """``collect``'s result as readable ``label  value`` lines."""
    incident = data["incident"]
    rows: List[Tuple[str, Any]] = [
        ("incident", data["incident_id"]),
        ("status", f"{data['status']} ({data['bucket']}: {data['path']})"),
        ("created", incident["created_at"]),
        ("updated", incident["updated_at"]),
        ("run", incident["run_id"]),
        ("step", incident["step"]),
        ("class", incident["failure_class"]),
        ("signature", incident["error_signature"]),
        ("message", incident["message"]),
    ]
    failures = incident.get("failures")
    if isinstance(failures, list):
        rows.append(("failures", len(failures)))
    plan = data["plan"]
    if plan is None:
        rows.append(("plan", "none"))
    else:
        rows.append(("plan", f"{plan['summary']} ({len(plan['actions'])} actions, {len(plan['verification_commands'])} verification commands)"))
        for action in plan["actions"]:
            rows.append(("", f"{action['id']}: {action['title']}"))
    rows.append(("attempts", data["attempts"]))
    for attempt in data["attempt_results"]:
        verdict = "passed" if attempt["verification_passed"] else "failed"
        stop = f", stop_reason {attempt['stop_reason']}" if attempt["stop_reason"] else ""
        rows.append(("", f"#{attempt['iteration']}: {verdict}, {attempt['result']}{stop}"))
    result = data["run_result"]
    if result is None:
        rows.append(("run result", "none"))
    else:
        stop = f", stop_reason {result['stop_reason']}" if result.get("stop_reason") else ""
        rows.append(("run result", f"{result['final_status']} after {result['loops_used']} loops{stop}"))
    rows.append(("events", data["events"]))
    for warning in data["warnings"]:
        rows.append(("warning", warning))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {_flat(value)}".rstrip() for label, value in rows)


def run(args: argparse.Namespace) -> int:
    """Show the incident; bad id 2, corrupted files 3, unknown id 4."""
    store = store_from_args(args)
    data = collect(store, incident_id_from_args(store, args))
    if args.json:
        print_json(data)
    else:
        print(format_text(data))
    return 0
