"""The report JSON (``selfheal report --format json``) and the incident view (``selfheal show``) as records.

:class:`ReportDoc` declares the fields a report read back from a file must have, with
their types (docs/report.md "Validation"); every other key is kept as read, so
``ReportDoc.from_json(doc, where).to_json()`` is ``doc`` again. The ``schema_version``
gate stays with ``report.data.parse_report``. :class:`IncidentView` is one incident as
``selfheal show`` and the MCP ``show`` tool read it (built by ``report.incident_view``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident, Triage
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
from pytest_selfheal.records.tolerant import as_int, as_str, opt_str, strs


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ReportIterationDoc(JsonRecord):
    """One iteration of a report incident: an optional ``outcomes`` object."""

    KIND: ClassVar[str] = "report"
    FIELDS: ClassVar[tuple[Field, ...]] = (Field("outcomes", json_object),)

    outcomes: Mapping[str, Any] = field(default_factory=empty_map)
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
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
        # Read by the plan-level rules (report.data.finish_report), any value accepted.
        Field("finished", any_value),
        Field("triage", any_value),
        Field("handoff", any_value),
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
    finished: Any = True  # absent in a report of an older version: finished
    triage: Any = ()
    handoff: Any = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CauseGroup:
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


# --------------------------------------------------------------------------- built by report.data


def _text(value: object) -> Optional[str]:
    """``str(value)`` when ``value`` is truthy, else None: how a report read back shows a value."""
    return str(value) if value else None


def _opt_bool(value: object) -> Optional[bool]:
    return None if value is None else bool(value)


@dataclass(frozen=True)
class ReportIteration:
    """One verification of an incident as the report JSON lists it (``incidents[].iterations``):
    built by ``report.data`` from an attempt, or read back tolerantly by :meth:`from_json`."""

    iteration: Optional[int]  # None: a report read back gave no integer
    mode: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    result: Optional[str] = None
    stop_reason: Optional[str] = None
    verification_passed: bool = False
    outcomes: Mapping[str, str] = field(default_factory=empty_map)  # node id -> outcome, the tests it ran
    fingerprints: tuple[str, ...] = ()
    error_signature: Optional[str] = None
    fingerprint_changed: Optional[bool] = None
    progress: Optional[bool] = None
    progress_reasons: tuple[str, ...] = ()
    diff_hash: Optional[str] = None
    repair_result: Optional[str] = None
    timed_out: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportIteration:
        """The iteration of a report JSON: a value of the wrong type reads as its default."""
        number = data.get("iteration")
        raw = data.get("outcomes")
        outcomes = {str(k): str(v) for k, v in raw.items() if v is not None} if isinstance(raw, Mapping) else {}
        return cls(
            iteration=number if isinstance(number, int) and not isinstance(number, bool) else None,
            mode=_text(data.get("mode")), started_at=opt_str(data.get("started_at")),
            finished_at=opt_str(data.get("finished_at")), result=opt_str(data.get("result")),
            stop_reason=opt_str(data.get("stop_reason")), verification_passed=bool(data.get("verification_passed")),
            outcomes=outcomes, fingerprints=tuple(strs(data.get("fingerprints"))),
            error_signature=opt_str(data.get("error_signature")),
            fingerprint_changed=_opt_bool(data.get("fingerprint_changed")), progress=_opt_bool(data.get("progress")),
            progress_reasons=tuple(strs(data.get("progress_reasons"))), diff_hash=opt_str(data.get("diff_hash")),
            repair_result=opt_str(data.get("repair_result")), timed_out=data.get("timed_out") is True)

    def to_json(self) -> dict[str, object]:
        """The iteration's object in the report JSON."""
        return {
            "iteration": self.iteration, "mode": self.mode, "started_at": self.started_at,
            "finished_at": self.finished_at, "result": self.result, "stop_reason": self.stop_reason,
            "verification_passed": self.verification_passed, "outcomes": dict(self.outcomes),
            "fingerprints": list(self.fingerprints), "error_signature": self.error_signature,
            "fingerprint_changed": self.fingerprint_changed, "progress": self.progress,
            "progress_reasons": list(self.progress_reasons), "diff_hash": self.diff_hash,
            "repair_result": self.repair_result, "timed_out": self.timed_out,
        }


@dataclass(frozen=True)
class ReportTask:
    """One plan action of an incident in the report JSON: its attempts and where it stopped.
    Built by ``report.data`` from the plan and the iterations, or read back tolerantly by
    :meth:`from_json`."""

    task: str
    title: str = ""
    nodeids: tuple[str, ...] = ()
    attempts: int = 0
    stop_reason: Optional[str] = None
    passed: bool = False
    flaky: bool = False
    fingerprint: Optional[str] = None
    fingerprints: tuple[str, ...] = ()
    signature: Optional[str] = None
    failure_type: Optional[str] = None
    where: Optional[str] = None  # the top suspect, when the plan has it
    label: str = ""  # ``A1 (…ab12cd)`` when a task id repeats across the report's incidents

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportTask:
        """The task of a report JSON: a value of the wrong type reads as its default."""
        task = str(data.get("task"))
        return cls(task=task, label=_text(data.get("label")) or task, attempts=as_int(data.get("attempts")),
                   stop_reason=opt_str(data.get("stop_reason")) or None, title=_text(data.get("title")) or "",
                   where=_text(data.get("where")), nodeids=tuple(strs(data.get("nodeids"))),
                   flaky=bool(data.get("flaky")), passed=bool(data.get("passed")),
                   fingerprint=opt_str(data.get("fingerprint")), fingerprints=tuple(strs(data.get("fingerprints"))),
                   signature=opt_str(data.get("signature")), failure_type=opt_str(data.get("failure_type")))

    def to_json(self) -> dict[str, object]:
        """The task's object in the report JSON (``label``: the task id unless labelled)."""
        data: dict[str, object] = {
            "task": self.task, "label": self.label or self.task, "title": self.title, "nodeids": list(self.nodeids),
            "attempts": self.attempts, "stop_reason": self.stop_reason, "passed": self.passed,
            "flaky": self.flaky, "fingerprint": self.fingerprint, "fingerprints": list(self.fingerprints),
            "signature": self.signature, "failure_type": self.failure_type,
        }
        if self.where is not None:
            data["where"] = self.where
        return data


@dataclass(frozen=True)
class NewFailure:
    """A failure outside the incident's selection, first seen in ``iteration`` (built by
    ``report.data``; read back tolerantly by :meth:`from_json`, ``iteration`` as read)."""

    nodeid: Optional[str]
    fingerprint: Optional[str]
    signature: Optional[str]
    failure_type: Optional[str]
    iteration: object

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> NewFailure:
        """The failure of a report JSON: a value of another type reads as its text, or None."""
        return cls(nodeid=_text(data.get("nodeid")), fingerprint=_text(data.get("fingerprint")),
                   signature=_text(data.get("signature")), failure_type=_text(data.get("failure_type")),
                   iteration=data.get("iteration"))

    def to_json(self) -> dict[str, object]:
        """The failure's object in the report JSON."""
        return {"nodeid": self.nodeid, "fingerprint": self.fingerprint, "signature": self.signature,
                "failure_type": self.failure_type, "iteration": self.iteration}


@dataclass(frozen=True)
class TriageEntry:
    """One captured failure's triage in the report (``incidents[].triage[]``): the failure's
    identity and its :class:`Triage` (turned ``flaky`` when the loop saw it pass on re-run)."""

    nodeid: Optional[str]
    fingerprint: Optional[str]
    failure_type: Optional[str]
    triage: Triage

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> TriageEntry:
        """The entry of a report JSON, read tolerantly: the identity as text or None, the
        triage's label and detail as strings (``""`` when not one), its base branch."""
        return cls(nodeid=_text(data.get("nodeid")), fingerprint=_text(data.get("fingerprint")),
                   failure_type=_text(data.get("failure_type")),
                   triage=Triage(as_str(data.get("label")), as_str(data.get("detail")),
                                 base_branch=opt_str(data.get("base_branch"))))

    def to_json(self) -> dict[str, object]:
        """The entry's object: the identity, then the triage's known fields that are set."""
        doc: dict[str, object] = {"fingerprint": self.fingerprint, "failure_type": self.failure_type,
                                  "nodeid": self.nodeid}
        for spec in Triage.FIELDS:
            value = getattr(self.triage, spec.key)
            if value is not None:
                doc[spec.key] = value
        return doc


@dataclass(frozen=True)
class IncidentEntry:
    """One incident of the report JSON as ``report.data`` builds it (docs/report.md "JSON").

    ``run_config``, ``decision_point``, ``handoff`` and ``triage`` are JSON copied from the
    run result and the history (their keys are the user's or another stage's).
    """

    incident_id: str
    status: str
    bucket: str
    created_at: Optional[str]
    step: Optional[str]
    failure_class: Optional[str]
    error_signature: Optional[str]
    capture_tests: tuple[str, ...]
    plan_revision: Optional[int]
    finished: bool
    final_status: str
    stop_reason: Optional[str]
    loops_used: int
    same_error_repeats: Optional[int]
    runtime_minutes: Optional[float]
    archived_to: Optional[str]
    run_config: Optional[Mapping[str, object]]
    tasks: tuple[ReportTask, ...]
    iterations: tuple[ReportIteration, ...]
    fingerprints_per_iteration: tuple[tuple[str, ...], ...]
    tests_fixed: tuple[str, ...]
    flaky_tests: tuple[str, ...]
    tests_edited: tuple[str, ...]
    unverified_failures: int
    new_failures: tuple[NewFailure, ...]
    triage: tuple[TriageEntry, ...]
    decision_point: Optional[Mapping[str, object]]
    handoff: Mapping[str, object]
    repair: Optional[Mapping[str, object]] = None  # what the repair did (None: no provider ran)

    def to_json(self) -> dict[str, object]:
        """The incident's object in the report JSON."""
        return {
            "incident_id": self.incident_id, "status": self.status, "bucket": self.bucket,
            "created_at": self.created_at, "step": self.step, "failure_class": self.failure_class,
            "error_signature": self.error_signature, "capture_tests": list(self.capture_tests),
            "plan_revision": self.plan_revision, "finished": self.finished, "final_status": self.final_status,
            "stop_reason": self.stop_reason, "loops_used": self.loops_used,
            "same_error_repeats": self.same_error_repeats, "runtime_minutes": self.runtime_minutes,
            "archived_to": self.archived_to, "run_config": self.run_config,
            "tasks": [t.to_json() for t in self.tasks], "iterations": [i.to_json() for i in self.iterations],
            "fingerprints_per_iteration": [list(f) for f in self.fingerprints_per_iteration],
            "tests_fixed": list(self.tests_fixed), "flaky_tests": list(self.flaky_tests),
            "tests_edited": list(self.tests_edited), "unverified_failures": self.unverified_failures,
            "new_failures": [f.to_json() for f in self.new_failures], "triage": [t.to_json() for t in self.triage],
            "decision_point": self.decision_point, "handoff": self.handoff, "repair": self.repair,
        }


@dataclass(frozen=True)
class ReportOutcome:
    """The plan-level fields of a report, derived from its incidents (docs/report.md), and
    each incident's task labels (``labels[i][j]``: incident i, task j)."""

    auto_tasks_looped: int
    total_retries: int
    triage_summary: Optional[Mapping[str, object]]
    stop_reason: object  # the deciding incident's, as its entry has it (a merged shard's as read)
    final_status: object
    recommended_next_action: str
    deciding_incident: Optional[str]
    labels: tuple[tuple[str, ...], ...] = ()

    def to_json(self) -> dict[str, object]:
        """The plan-level keys of the report JSON."""
        return {
            "auto_tasks_looped": self.auto_tasks_looped, "total_retries": self.total_retries,
            "triage_summary": self.triage_summary, "stop_reason": self.stop_reason,
            "final_status": self.final_status, "recommended_next_action": self.recommended_next_action,
            "deciding_incident": self.deciding_incident,
        }


@dataclass(frozen=True)
class Shard:
    """One shard of a merged report as ``report.merge`` writes it (``shards[]``), or as read
    back tolerantly by :meth:`from_json`."""

    name: str
    incidents: tuple[str, ...] = ()  # the incidents the merge took from it
    duplicates: tuple[str, ...] = ()  # those already in an earlier shard
    stop_reason: object = None  # the shard's plan-level values, as read
    final_status: object = None
    total_retries: object = None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Shard:
        """The shard of a report JSON (non-string ids dropped)."""
        return cls(name=str(data.get("name")), incidents=tuple(strs(data.get("incidents"))),
                   duplicates=tuple(strs(data.get("duplicates"))), stop_reason=data.get("stop_reason"),
                   final_status=data.get("final_status"), total_retries=data.get("total_retries"))

    def to_json(self) -> dict[str, object]:
        """The shard's object in the report JSON."""
        return {"name": self.name, "incidents": list(self.incidents), "duplicates": list(self.duplicates),
                "stop_reason": self.stop_reason, "final_status": self.final_status,
                "total_retries": self.total_retries}


@dataclass(frozen=True)
class ConfigDifference:
    """A shard whose config differs from the first shard's (``config_differences[]``)."""

    shard: str
    keys: tuple[str, ...]
    values: Mapping[str, object]  # {dotted key: the shard's value}, JSON

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ConfigDifference:
        """The difference of a report JSON (a merged report merged again, or rendered)."""
        values = data.get("values")
        return cls(shard=as_str(data.get("shard")), keys=tuple(strs(data.get("keys"))),
                   values={str(k): v for k, v in values.items()} if isinstance(values, Mapping) else {})

    def to_json(self) -> dict[str, object]:
        """The difference's object in the report JSON."""
        return {"shard": self.shard, "keys": list(self.keys), "values": dict(self.values)}
