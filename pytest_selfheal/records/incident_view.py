"""One incident as ``selfheal show`` and the MCP ``show`` tool read it, as records (built by
``report.incident_view``): :class:`IncidentView` with its root-cause groups and plan. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.run_result import RunResult


@dataclass(frozen=True)
class CauseGroup:
    """One root-cause group: a plan action's, or (no plan yet) one computed from the failures.

    ``where``, ``assertion``, ``suspects`` (``name (path:line, evidence, score)``) and
    ``excerpt`` (numbered code lines) are the action's *where*, each only when the plan has it;
    ``also_where`` and ``also_excerpt`` its second suspect's, when the two are equals.
    """

    action: Optional[str]
    evidence: str
    path: Optional[str]
    name: Optional[str]
    signature: Optional[str]
    nodeids: tuple[str, ...]
    target_paths: tuple[str, ...] = ()
    test_paths: tuple[str, ...] = ()
    where: Optional[str] = None
    assertion: Optional[str] = None
    suspects: tuple[str, ...] = ()
    excerpt: Optional[tuple[str, ...]] = None
    also_where: Optional[str] = None
    also_excerpt: Optional[tuple[str, ...]] = None
    from_plan: bool = True  # a computed group writes path and name only when set

    def to_json(self) -> dict[str, object]:
        """The group as ``selfheal show --json`` prints it."""
        data: dict[str, object] = {"action": self.action, "evidence": self.evidence}
        if self.from_plan or self.path is not None:
            data["path"] = self.path
        if self.from_plan or self.name is not None:
            data["name"] = self.name
        data.update(signature=self.signature, target_paths=list(self.target_paths),
                    test_paths=list(self.test_paths), nodeids=list(self.nodeids))
        if self.where:
            data["where"] = self.where
        if self.assertion:
            data["assertion"] = self.assertion
        if self.suspects:
            data["suspects"] = list(self.suspects)
        if self.excerpt is not None:
            data["excerpt"] = list(self.excerpt)
        if self.also_where:
            data["also_where"] = self.also_where
        if self.also_excerpt is not None:
            data["also_excerpt"] = list(self.also_excerpt)
        return data

    @property
    def others(self) -> tuple[str, ...]:
        """The suspects after the top one and its equal."""
        return self.suspects[2 if self.also_where else 1:]

    def where_line(self) -> Optional[str]:
        """``where: path:line`` (both, when two suspects are equals) and the assertion's line."""
        if not self.where:
            return None
        both = f"{self.where} or {self.also_where}, equal suspects: check both" if self.also_where else self.where
        return f"where: {both}" + (f" (assertion {self.assertion})" if self.assertion else "")


@dataclass(frozen=True)
class PlanSummary:
    """The plan as the view shows it: summary, action ids and titles, verification commands."""

    generated_at: str
    summary: str
    actions: tuple[tuple[str, str], ...]
    verification_commands: tuple[str, ...]
    path: str

    def to_json(self) -> dict[str, object]:
        """The plan summary as ``selfheal show --json`` prints it."""
        return {"generated_at": self.generated_at, "summary": self.summary,
                "actions": [{"id": i, "title": t} for i, t in self.actions],
                "verification_commands": list(self.verification_commands), "path": self.path}


@dataclass(frozen=True)
class IncidentView:
    """One incident with its groups, plan, attempts and run result (``now``: the MCP's note
    on the latest attempt, see ``mcp_server.tools.current_view``)."""

    incident_id: str
    status: str
    bucket: str
    path: str
    incident: Incident
    root_causes: tuple[CauseGroup, ...]
    plan: Optional[PlanSummary]
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
            "root_causes": [cause.to_json() for cause in self.root_causes],
            "plan": self.plan.to_json() if self.plan is not None else None,
            "attempts": len(self.attempts),
            "attempt_results": [
                {
                    "iteration": a.iteration,
                    "result": a.result,
                    "verification_passed": a.verification_passed,
                    "stop_reason": a.stop_reason,
                    "error_signature": a.error_signature,
                }
                for a in self.attempts
            ],
            "run_result": self.run_result.to_json() if self.run_result is not None else None,
            "events": self.events,
            "warnings": list(self.warnings),
        }
