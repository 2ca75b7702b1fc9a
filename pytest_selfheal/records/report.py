"""The report JSON (``selfheal report --format json``) and the incident view (``selfheal show``) as records.

:class:`ReportDoc` declares the fields a report read back from a file must have, with
their types (docs/report.md "Validation"); every other key is kept as read, so
``ReportDoc.from_json(doc, where).to_json()`` is ``doc`` again. The ``schema_version``
gate stays with ``report.data.validate_report``. :class:`IncidentView` is one incident as
``selfheal show`` and the MCP ``show`` tool read it (built by ``report.incident_view``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar, Optional

from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import (
    Extra,
    Field,
    JsonRecord,
    any_value,
    array_of,
    boolean,
    empty_map,
    integer,
    json_array,
    json_object,
    string,
)
from pytest_selfheal.records.run_result import RunResult


@dataclass(frozen=True, eq=False, repr=False)
class ReportTaskDoc(JsonRecord):
    """One task of a report incident: ``task``, ``attempts``, ``stop_reason`` must be there."""

    KIND: ClassVar[str] = "report"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("task", any_value, required=True),
        Field("attempts", integer, required=True),
        Field("stop_reason", any_value, required=True),
    )

    task: Any = None
    attempts: int = 0
    stop_reason: Any = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class ReportIterationDoc(JsonRecord):
    """One iteration of a report incident: an optional ``outcomes`` object."""

    KIND: ClassVar[str] = "report"
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("outcomes", json_object),)

    outcomes: Mapping[str, Any] = field(default_factory=empty_map)
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class ReportIncidentDoc(JsonRecord):
    """One incident of a report: the keys the merge and the renderer rely on."""

    KIND: ClassVar[str] = "report"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("incident_id", string, required=True),
        Field("status", any_value, required=True),
        Field("bucket", any_value, required=True),
        Field("final_status", any_value, required=True),
        Field("stop_reason", any_value, required=True),
        Field("loops_used", integer, required=True),
        Field("tasks", array_of(ReportTaskDoc.parse), required=True),
        Field("iterations", array_of(ReportIterationDoc.parse), required=True),
        Field("fingerprints_per_iteration", json_array, required=True),
        Field("tests_fixed", json_array, required=True),
        Field("flaky_tests", json_array, required=True),
    )

    incident_id: str = ""
    status: Any = None
    bucket: Any = None
    final_status: Any = None
    stop_reason: Any = None
    loops_used: int = 0
    tasks: tuple[ReportTaskDoc, ...] = ()
    iterations: tuple[ReportIterationDoc, ...] = ()
    fingerprints_per_iteration: tuple[Any, ...] = ()
    tests_fixed: tuple[Any, ...] = ()
    flaky_tests: tuple[Any, ...] = ()
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class ReportDoc(JsonRecord):
    """A whole report JSON: the plan-level keys and its incidents (docs/report.md "JSON")."""

    KIND: ClassVar[str] = "report"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("schema_version", integer, required=True),
        Field("title", any_value, required=True),
        Field("enabled", boolean, required=True),
        Field("effective_config", json_object, required=True),
        Field("origins", json_object, required=True),
        Field("auto_tasks_looped", any_value, required=True),
        Field("total_retries", any_value, required=True),
        Field("incidents", array_of(ReportIncidentDoc.parse), required=True),
        Field("stop_reason", any_value, required=True),
        Field("final_status", any_value, required=True),
        Field("recommended_next_action", any_value, required=True),
    )

    schema_version: int = 1
    title: Any = None
    enabled: bool = True
    effective_config: Mapping[str, Any] = field(default_factory=empty_map)
    origins: Mapping[str, Any] = field(default_factory=empty_map)
    auto_tasks_looped: Any = None
    total_retries: Any = None
    incidents: tuple[ReportIncidentDoc, ...] = ()
    stop_reason: Any = None
    final_status: Any = None
    recommended_next_action: Any = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class CauseGroup(Frozen):
    """One root-cause group: a plan action's, or (no plan yet) one computed from the failures.

    ``where``, ``assertion``, ``suspects`` (``name (path:line, evidence, score)``) and
    ``excerpt`` (numbered code lines) are the action's *where*, each only when the plan has it.
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
        return data


@dataclass(frozen=True, eq=False, repr=False)
class PlanSummary(Frozen):
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


@dataclass(frozen=True, eq=False, repr=False)
class IncidentView(Frozen):
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
