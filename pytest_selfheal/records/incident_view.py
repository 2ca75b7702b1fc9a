"""One incident as ``selfheal show`` and the MCP ``show`` tool read it, as records (built by
``report.incident_view``): :class:`IncidentView` with its root-cause groups and plan. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.names import PLANS_DIR
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan, PlanAction
from pytest_selfheal.records.run_result import RunResult


def cause_json(action: PlanAction) -> dict[str, object]:
    """A root-cause group as ``selfheal show --json`` prints it: a plan action, or one computed
    without a plan (no id), whose path and name are written only when known."""
    key = action.key
    data: dict[str, object] = {"action": action.id or None, "evidence": key.evidence}
    data.update((name, value) for name, value in (("path", key.path), ("name", key.name))
                if action.id or value is not None)
    data.update(signature=action.signature, target_paths=list(action.target_paths),
                test_paths=list(action.test_paths), nodeids=list(action.nodeids))
    # Each of these only when there is one (an excerpt always holds its suspect's line).
    shown = {"where": action.where, "assertion": action.assertion, "suspects": list(action.suspect_lines()),
             "excerpt": action.excerpt and list(action.excerpt.numbered()), "also_where": action.also_where,
             "also_excerpt": action.also_excerpt and list(action.also_excerpt.numbered())}
    data.update((name, value) for name, value in shown.items() if value)
    return data


# What `selfheal show --json` says of each attempt.
_ATTEMPT_KEYS = ("iteration", "result", "verification_passed", "stop_reason", "error_signature")


@dataclass(frozen=True)
class IncidentView:
    """One incident with its groups, plan, attempts and run result (``now``: the MCP's note
    on the latest attempt, see ``mcp_server.tools.current_view``)."""

    incident_id: str
    status: str
    bucket: str
    path: str
    incident: Incident
    root_causes: tuple[PlanAction, ...]  # a computed group (no plan yet) has no id
    plan: Optional[Plan]
    attempts: tuple[Attempt, ...]
    run_result: Optional[RunResult]
    events: int
    warnings: tuple[str, ...]
    now: Optional[str] = None

    def to_json(self) -> dict[str, object]:
        """The view as one JSON-friendly dict: what ``selfheal show --json`` prints."""
        return {
            "incident_id": self.incident_id,
            "status": self.status,
            "bucket": self.bucket,
            "path": self.path,
            "incident": self.incident.to_json(),
            "root_causes": [cause_json(cause) for cause in self.root_causes],
            "plan": None if self.plan is None else {
                "generated_at": self.plan.generated_at, "summary": self.plan.summary,
                "actions": [{"id": a.id, "title": a.title} for a in self.plan.actions],
                "verification_commands": list(self.plan.verification_commands), "path": f"{PLANS_DIR}/{self.incident_id}"},
            "attempts": len(self.attempts),
            "attempt_results": [{key: getattr(a, key) for key in _ATTEMPT_KEYS} for a in self.attempts],
            "run_result": self.run_result.to_json() if self.run_result is not None else None,
            "events": self.events,
            "warnings": list(self.warnings),
        }
