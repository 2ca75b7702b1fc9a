"""The report (``selfheal report``) as records: one model from the build to every rendering.

:class:`ReportDoc` declares the fields a report read back from a file must have, with
their types (docs/report.md "Validation"); every other key is kept as read, so
``ReportDoc.from_json(doc, where).to_json()`` is ``doc`` again. The ``schema_version``
gate stays with ``report.data.parse_report``.

The content of a report is one set of records: ``report.data`` builds :class:`ReportIncident`
(→ :class:`ReportTask`, :class:`ReportIteration`, :class:`TriageEntry`, :class:`NewFailure`,
the run result's ``DecisionPoint``), ``report.merge`` adds :class:`Shard` and
:class:`ConfigDifference`; each writes its JSON (``to_json``) and reads it back tolerantly
(``from_json``: a value of the wrong type reads as its default, one odd entry never stops a
report), and :class:`Report` is the whole report as the renderer reads it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

from pytest_selfheal.records.incident import Triage
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
from pytest_selfheal.records.run_result import DecisionOption, DecisionPoint
from pytest_selfheal.records.tolerant import as_int, as_str, dicts, opt_str, strs


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


# --------------------------------------------------------------------------- built by report.data


def _text(value: object) -> Optional[str]:
    """``str(value)`` when ``value`` is truthy, else None: how a report read back shows a value."""
    return str(value) if value else None


def _opt_bool(value: object) -> Optional[bool]:
    return None if value is None else bool(value)


def _mapping(value: object) -> Optional[Mapping[str, object]]:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else None


def _option(data: object) -> DecisionOption:
    """One option of a decision point read tolerantly; a bare value is its label alone."""
    if not isinstance(data, Mapping):
        return DecisionOption(label=str(data))
    return DecisionOption(id=opt_str(data.get("id")) or "", label=_text(data.get("label") or data.get("id")) or "",
                          command=opt_str(data.get("command")))


def _decision_point(data: Mapping[str, object]) -> DecisionPoint:
    """The run result's decision point as the report carries it, read tolerantly."""
    options = data.get("options")
    return DecisionPoint(reason=opt_str(data.get("reason")) or "", message=_text(data.get("message")) or "",
                         options=tuple(_option(o) for o in options) if isinstance(options, list) else ())


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
class ReportIncident:
    """One incident of the report JSON (docs/report.md "JSON"): built by ``report.data``, or
    read back tolerantly by :meth:`from_json` (a value of the wrong type reads as its default,
    so that one odd entry never stops a report from rendering).

    ``run_config``, ``handoff`` and ``repair`` are JSON copied from the run result (their keys
    are the user's or another stage's); ``same_error_repeats`` is as read.
    """

    incident_id: str
    status: str
    bucket: Optional[str]
    created_at: Optional[str]
    step: Optional[str]
    failure_class: Optional[str]
    error_signature: Optional[str]
    capture_tests: tuple[str, ...]
    plan_revision: Optional[int]
    finished: bool
    final_status: Optional[str]
    stop_reason: Optional[str]
    loops_used: int
    same_error_repeats: object
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
    decision_point: Optional[DecisionPoint]
    handoff: Mapping[str, object]
    repair: Optional[Mapping[str, object]] = None  # what the repair did (None: no provider ran)

    @property
    def capture_fingerprints(self) -> tuple[str, ...]:
        """The failing fingerprints of the capture (iteration 0)."""
        return self.fingerprints_per_iteration[0] if self.fingerprints_per_iteration else ()

    @property
    def next_action(self) -> Optional[str]:
        """The handoff's recommended next action, when it has one."""
        return _text(self.handoff.get("recommended_next_action"))

    @property
    def repair_summary(self) -> tuple[str, ...]:
        """What the repair did, one sentence per call and its end (empty: no provider ran)."""
        return tuple(strs((self.repair or {}).get("summary")))

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportIncident:
        """The incident of a report JSON (built, merged or a file read back), read tolerantly."""
        fpi = data.get("fingerprints_per_iteration")
        point = data.get("decision_point")
        runtime = data.get("runtime_minutes")
        final_status = data.get("final_status")
        revision = data.get("plan_revision")
        return cls(
            incident_id=str(data.get("incident_id")), status=str(data.get("status")),
            bucket=opt_str(data.get("bucket")), created_at=opt_str(data.get("created_at")),
            step=opt_str(data.get("step")), failure_class=opt_str(data.get("failure_class")),
            error_signature=_text(data.get("error_signature")), capture_tests=tuple(strs(data.get("capture_tests"))),
            plan_revision=revision if isinstance(revision, int) and not isinstance(revision, bool) else None,
            finished=bool(data.get("finished", True)),  # absent in a report of an older version: finished
            final_status=None if final_status is None else str(final_status),
            stop_reason=opt_str(data.get("stop_reason")) or None, loops_used=as_int(data.get("loops_used")),
            same_error_repeats=data.get("same_error_repeats"),
            runtime_minutes=float(runtime) if isinstance(runtime, (int, float)) and not isinstance(runtime, bool)
            else None,
            archived_to=_text(data.get("archived_to")), run_config=_mapping(data.get("run_config")),
            tasks=tuple(ReportTask.from_json(t) for t in dicts(data.get("tasks"))),
            iterations=tuple(ReportIteration.from_json(i) for i in dicts(data.get("iterations"))),
            fingerprints_per_iteration=tuple(tuple(strs(f)) for f in fpi) if isinstance(fpi, list) else (),
            tests_fixed=tuple(strs(data.get("tests_fixed"))), flaky_tests=tuple(strs(data.get("flaky_tests"))),
            tests_edited=tuple(strs(data.get("tests_edited"))),
            unverified_failures=as_int(data.get("unverified_failures")),
            new_failures=tuple(NewFailure.from_json(f) for f in dicts(data.get("new_failures"))),
            triage=tuple(TriageEntry.from_json(t) for t in dicts(data.get("triage"))),
            decision_point=_decision_point(point) if isinstance(point, Mapping) else None,
            handoff=_mapping(data.get("handoff")) or {}, repair=_mapping(data.get("repair")),
        )

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
            "decision_point": self.decision_point.to_json() if self.decision_point is not None else None,
            "handoff": self.handoff, "repair": self.repair,
        }


@dataclass(frozen=True)
class ReportOutcome:
    """The plan-level fields of a report, derived from its incidents (docs/report.md), and
    each incident's task labels (``labels[i][j]``: incident i, task j)."""

    auto_tasks_looped: int
    total_retries: int
    triage_summary: Optional[Mapping[str, object]]
    stop_reason: Optional[str]  # the deciding incident's
    final_status: Optional[str]
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


@dataclass(frozen=True)
class Report:
    """A whole report as the renderer reads it: the plan-level outcome, the config and its
    origins, the incidents; parsed once, tolerantly, by :meth:`from_json`."""

    enabled: bool
    effective_config: Mapping[str, object]
    origins: Mapping[str, str]
    auto_tasks_looped: str
    total_retries: int
    final_status: Optional[str]
    stop_reason: Optional[str]
    recommended_next_action: str
    incidents: tuple[ReportIncident, ...]
    deciding_incident: Optional[str] = None
    triage_line: Optional[str] = None
    config_differences: tuple[ConfigDifference, ...] = ()
    shards: tuple[Shard, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Report:
        """The records of a report JSON (``build_report``, ``merge_reports``, a file read back)."""
        triage = data.get("triage_summary")
        final_status = data.get("final_status")
        origins = data.get("origins")
        return cls(
            enabled=bool(data.get("enabled")), effective_config=_mapping(data.get("effective_config")) or {},
            origins={str(k): str(v) for k, v in origins.items()} if isinstance(origins, Mapping) else {},
            auto_tasks_looped=str(data.get("auto_tasks_looped")), total_retries=as_int(data.get("total_retries")),
            final_status=None if final_status is None else str(final_status),
            stop_reason=opt_str(data.get("stop_reason")) or None,
            recommended_next_action=str(data.get("recommended_next_action")),
            incidents=tuple(ReportIncident.from_json(e) for e in dicts(data.get("incidents"))),
            deciding_incident=_text(data.get("deciding_incident")),
            triage_line=opt_str(triage.get("line")) if isinstance(triage, Mapping) else None,
            config_differences=tuple(ConfigDifference.from_json(d) for d in dicts(data.get("config_differences"))),
            shards=tuple(Shard.from_json(s) for s in dicts(data.get("shards"))),
        )


# The report as its callers hold it: built, merged or read back (``ReportDoc``), its JSON
# (the ``selfheal ci`` document), or the renderer's records.
ReportInput = Union[Report, ReportDoc, Mapping[str, Any]]


def as_report(report: ReportInput) -> Report:
    """The records of ``report``: parsed once from the report JSON, or ``report`` itself."""
    if isinstance(report, Report):
        return report
    return Report.from_json(report.to_json() if isinstance(report, ReportDoc) else report)
