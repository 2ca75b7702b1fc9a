"""The report (``selfheal report``) as records: one model from the build to every rendering.

A report is one set of records: ``report.data`` builds :class:`ReportIncident` (→
:class:`ReportTask`, :class:`ReportIteration`, :class:`TriageEntry`, :class:`NewFailure`,
the run result's ``DecisionPoint``) and ``report.outcome`` puts them in a :class:`Report`
with the plan-level fields; ``report.merge`` unites reports into one, adding :class:`Shard`
and :class:`ConfigDifference`. Each record writes its JSON (``to_json``) and reads it back
tolerantly (``from_json``: a value of the wrong type reads as its default, one odd entry
never stops a report). A report JSON read back from a file is checked first
(:meth:`Report.read`: the keys and types of docs/report.md "Validation"); the keys a record
does not know (a newer version's, the ``ci`` block of ``selfheal ci``) are kept as read in
its ``extra`` and written back, so a merge carries them. Pure.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

from pytest_selfheal.errors import InputError, one_line
from pytest_selfheal.records.incident import Triage
from pytest_selfheal.records.jsondoc import (
    Field,
    FieldError,
    FrozenObject,
    Parser,
    any_value,
    array_of,
    boolean,
    child,
    empty_map,
    fields_of,
    freeze,
    integer,
    json_array,
    json_object,
    plain_json,
    string,
    type_name,
)
from pytest_selfheal.records.run_result import DecisionOption, DecisionPoint
from pytest_selfheal.records.tolerant import as_int, as_str, dicts, opt_str, strs

REPORT_SCHEMA_VERSION = 1
REPORT_TITLE = "RALF Lite Loop Report"


# --------------------------------------------------------------------------- a report read back


def _required(**parsers: Parser) -> tuple[Field, ...]:
    """The keys a record's JSON must have, each with its check (``any_value``: any value)."""
    return tuple(Field(key, parse, required=True) for key, parse in parsers.items())


class _ReadBack:
    """A report record as a file holds it: ``CHECKED`` are the keys its JSON must have
    (``required``) and the types they must have when present (docs/report.md "Validation");
    ``WRITTEN`` the keys its ``to_json`` writes that are not fields."""

    CHECKED: ClassVar[tuple[Field, ...]] = ()
    WRITTEN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check(cls, doc: Any, path: str) -> None:
        """``FieldError`` for the first bad field of ``doc`` at ``path``: a missing key in
        ``CHECKED`` order, else a value of the wrong type in the document's order."""
        if not isinstance(doc, dict):
            raise FieldError(path, f"expected object, got {type_name(doc)}", expected="object")
        for spec in cls.CHECKED:
            if spec.required and spec.key not in doc:
                raise FieldError(child(path, spec.key), "required field missing")
        parsers = {spec.key: spec.parse for spec in cls.CHECKED}
        for key, value in doc.items():
            parse = parsers.get(key)
            if parse is not None:
                parse(value, child(path, key))

    @classmethod
    def unknown(cls, data: Mapping[str, object]) -> FrozenObject:
        """The keys of ``data`` the record does not model, frozen as read (its ``extra``)."""
        known = _known_keys(cls)
        extra = {key: value for key, value in data.items() if key not in known}
        return freeze(extra) if extra else empty_map()


_KNOWN_KEYS: dict[type, frozenset[str]] = {}


def _known_keys(cls: type[_ReadBack]) -> frozenset[str]:
    """The JSON keys ``cls`` models: its fields (``extra`` aside) and its ``WRITTEN`` keys."""
    known = _KNOWN_KEYS.get(cls)
    if known is None:
        names = (f.name for f in dataclasses.fields(cls) if f.name != "extra")  # type: ignore[arg-type]  # a dataclass
        known = _KNOWN_KEYS[cls] = frozenset(names) | frozenset(cls.WRITTEN)
    return known


def _text(value: object) -> Optional[str]:
    """``str(value)`` when ``value`` is truthy, else None: how a report read back shows a value."""
    return str(value) if value else None


def _opt_bool(value: object) -> Optional[bool]:
    return None if value is None else bool(value)


def _mapping(value: object) -> Optional[Mapping[str, object]]:
    """A JSON object as read, frozen (None when ``value`` is no object)."""
    return freeze({str(k): v for k, v in value.items()}) if isinstance(value, Mapping) else None


def _count(value: object) -> int:
    """An integer count (an integral float, as the check of a file lets through, counts)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return as_int(value)


def _option(data: object) -> DecisionOption:
    """One option of a decision point read tolerantly; a bare value is its label alone."""
    if not isinstance(data, Mapping):
        return DecisionOption(label=str(data))
    return DecisionOption(id=opt_str(data.get("id")) or "", label=_text(data.get("label") or data.get("id")) or "",
                          command=opt_str(data.get("command")))


def _decision_point(data: Mapping[str, object]) -> DecisionPoint:
    """The run result's decision point as the report carries it: as recorded (every key kept),
    or read tolerantly when a value does not fit the record."""
    try:
        return DecisionPoint.parse(data, "decision_point")
    except FieldError:
        pass
    options = data.get("options")
    return DecisionPoint(reason=opt_str(data.get("reason")) or "", message=_text(data.get("message")) or "",
                         options=tuple(_option(o) for o in options) if isinstance(options, list) else ())


@dataclass(frozen=True)
class ReportIteration(_ReadBack):
    """One verification of an incident as the report JSON lists it (``incidents[].iterations``):
    built by ``report.data`` from an attempt, or read back tolerantly by :meth:`from_json`."""

    CHECKED: ClassVar[tuple[Field, ...]] = (Field("outcomes", json_object),)

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
    extra: FrozenObject = field(default_factory=empty_map)  # keys of a newer version, as read

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportIteration:
        """The iteration of a report JSON: a value of the wrong type reads as its default."""
        number = data.get("iteration")
        raw = data.get("outcomes")
        outcomes = {str(k): str(v) for k, v in raw.items() if v is not None} if isinstance(raw, Mapping) else {}
        return cls(
            iteration=number if isinstance(number, int) and not isinstance(number, bool) else None,
            mode=opt_str(data.get("mode")), started_at=opt_str(data.get("started_at")),
            finished_at=opt_str(data.get("finished_at")), result=opt_str(data.get("result")),
            stop_reason=opt_str(data.get("stop_reason")), verification_passed=bool(data.get("verification_passed")),
            outcomes=outcomes, fingerprints=tuple(strs(data.get("fingerprints"))),
            error_signature=opt_str(data.get("error_signature")),
            fingerprint_changed=_opt_bool(data.get("fingerprint_changed")), progress=_opt_bool(data.get("progress")),
            progress_reasons=tuple(strs(data.get("progress_reasons"))), diff_hash=opt_str(data.get("diff_hash")),
            repair_result=opt_str(data.get("repair_result")), timed_out=data.get("timed_out") is True,
            extra=cls.unknown(data))

    def to_json(self) -> dict[str, object]:
        """The iteration's object in the report JSON."""
        return {
            "iteration": self.iteration, "mode": self.mode, "started_at": self.started_at,
            "finished_at": self.finished_at, "result": self.result, "stop_reason": self.stop_reason,
            "verification_passed": self.verification_passed, "outcomes": dict(self.outcomes),
            "fingerprints": list(self.fingerprints), "error_signature": self.error_signature,
            "fingerprint_changed": self.fingerprint_changed, "progress": self.progress,
            "progress_reasons": list(self.progress_reasons), "diff_hash": self.diff_hash,
            "repair_result": self.repair_result, "timed_out": self.timed_out, **plain_json(self.extra),
        }


@dataclass(frozen=True)
class ReportTask(_ReadBack):
    """One plan action of an incident in the report JSON: its attempts and where it stopped.
    Built by ``report.data`` from the plan and the iterations, or read back tolerantly by
    :meth:`from_json`."""

    CHECKED: ClassVar[tuple[Field, ...]] = _required(task=any_value, attempts=integer, stop_reason=any_value)

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
    also_where: Optional[str] = None  # the second suspect, when it is the top's equal
    label: str = ""  # ``A1 (…ab12cd)`` when a task id repeats across the report's incidents
    extra: FrozenObject = field(default_factory=empty_map)  # keys of a newer version, as read

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportTask:
        """The task of a report JSON: a value of the wrong type reads as its default."""
        task = str(data.get("task"))
        return cls(task=task, label=_text(data.get("label")) or task, attempts=_count(data.get("attempts")),
                   stop_reason=opt_str(data.get("stop_reason")) or None, title=_text(data.get("title")) or "",
                   where=opt_str(data.get("where")), also_where=opt_str(data.get("also_where")), nodeids=tuple(strs(data.get("nodeids"))),
                   flaky=bool(data.get("flaky")), passed=bool(data.get("passed")),
                   fingerprint=opt_str(data.get("fingerprint")), fingerprints=tuple(strs(data.get("fingerprints"))),
                   signature=opt_str(data.get("signature")), failure_type=opt_str(data.get("failure_type")),
                   extra=cls.unknown(data))

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
        if self.also_where is not None:
            data["also_where"] = self.also_where
        data.update(plain_json(self.extra))
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
        """The failure of a report JSON: a value that is no string reads as None."""
        return cls(nodeid=opt_str(data.get("nodeid")), fingerprint=opt_str(data.get("fingerprint")),
                   signature=opt_str(data.get("signature")), failure_type=opt_str(data.get("failure_type")),
                   iteration=freeze(data.get("iteration")))

    def to_json(self) -> dict[str, object]:
        """The failure's object in the report JSON."""
        return {"nodeid": self.nodeid, "fingerprint": self.fingerprint, "signature": self.signature,
                "failure_type": self.failure_type, "iteration": plain_json(self.iteration)}


def _lenient(spec: Field, value: object) -> Any:
    """``value`` parsed by the record field ``spec``, or None when it does not fit."""
    try:
        return spec.parse(value, spec.key)
    except FieldError:
        return None


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
        """The entry of a report JSON, read tolerantly: the identity as a string or None, the
        triage's label and detail as strings (``""`` when not one), each other field of
        :class:`Triage` as its type or None."""
        evidence = {spec.name: _lenient(spec, data.get(spec.key)) for spec in fields_of(Triage) if not spec.required}
        return cls(nodeid=opt_str(data.get("nodeid")), fingerprint=opt_str(data.get("fingerprint")),
                   failure_type=opt_str(data.get("failure_type")),
                   triage=Triage(as_str(data.get("label")), as_str(data.get("detail")), **evidence))

    def to_json(self) -> dict[str, object]:
        """The entry's object: the identity, then the triage's known fields that are set."""
        doc: dict[str, object] = {"fingerprint": self.fingerprint, "failure_type": self.failure_type,
                                  "nodeid": self.nodeid}
        for spec in fields_of(Triage):
            value = getattr(self.triage, spec.key)
            if value is not None:
                doc[spec.key] = value
        return doc


@dataclass(frozen=True)
class ReportIncident(_ReadBack):
    """One incident of the report JSON (docs/report.md "JSON"): built by ``report.data``, or
    read back tolerantly by :meth:`from_json` (a value of the wrong type reads as its default,
    so that one odd entry never stops a report from rendering).

    ``run_config``, ``handoff`` and ``repair`` are JSON copied from the run result (their keys
    are the user's or another stage's); ``same_error_repeats`` is as read.
    """

    # The keys the merge and the renderer rely on.
    CHECKED: ClassVar[tuple[Field, ...]] = _required(
        incident_id=string, status=any_value, bucket=any_value, final_status=any_value, stop_reason=any_value,
        loops_used=integer, tasks=array_of(ReportTask.check), iterations=array_of(ReportIteration.check),
        fingerprints_per_iteration=json_array, tests_fixed=json_array, flaky_tests=json_array)

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
    # The last regression check: {"tests_run": N, "broken": [node ids]} (None: none ran).
    regression_check: Optional[Mapping[str, object]] = None
    extra: FrozenObject = field(default_factory=empty_map)  # keys of a newer version, as read

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
            error_signature=opt_str(data.get("error_signature")), capture_tests=tuple(strs(data.get("capture_tests"))),
            plan_revision=revision if isinstance(revision, int) and not isinstance(revision, bool) else None,
            finished=bool(data.get("finished", True)),  # absent in a report of an older version: finished
            final_status=None if final_status is None else str(final_status),
            stop_reason=opt_str(data.get("stop_reason")) or None, loops_used=_count(data.get("loops_used")),
            same_error_repeats=freeze(data.get("same_error_repeats")),
            runtime_minutes=runtime if isinstance(runtime, (int, float)) and not isinstance(runtime, bool) else None,
            archived_to=opt_str(data.get("archived_to")), run_config=_mapping(data.get("run_config")),
            tasks=tuple(ReportTask.from_json(t) for t in dicts(data.get("tasks"))),
            iterations=tuple(ReportIteration.from_json(i) for i in dicts(data.get("iterations"))),
            fingerprints_per_iteration=tuple(tuple(strs(f)) for f in fpi) if isinstance(fpi, list) else (),
            tests_fixed=tuple(strs(data.get("tests_fixed"))), flaky_tests=tuple(strs(data.get("flaky_tests"))),
            tests_edited=tuple(strs(data.get("tests_edited"))),
            unverified_failures=as_int(data.get("unverified_failures")),
            new_failures=tuple(NewFailure.from_json(f) for f in dicts(data.get("new_failures"))),
            triage=tuple(TriageEntry.from_json(t) for t in dicts(data.get("triage"))),
            decision_point=_decision_point(point) if isinstance(point, Mapping) else None,
            handoff=_mapping(data.get("handoff")) or empty_map(), repair=_mapping(data.get("repair")),
            regression_check=_mapping(data.get("regression_check")), extra=cls.unknown(data),
        )

    def to_json(self) -> dict[str, object]:
        """The incident's object in the report JSON."""
        return {
            "incident_id": self.incident_id, "status": self.status, "bucket": self.bucket,
            "created_at": self.created_at, "step": self.step, "failure_class": self.failure_class,
            "error_signature": self.error_signature, "capture_tests": list(self.capture_tests),
            "plan_revision": self.plan_revision, "finished": self.finished, "final_status": self.final_status,
            "stop_reason": self.stop_reason, "loops_used": self.loops_used,
            "same_error_repeats": plain_json(self.same_error_repeats), "runtime_minutes": self.runtime_minutes,
            "archived_to": self.archived_to, "run_config": plain_json(self.run_config),
            "tasks": [t.to_json() for t in self.tasks], "iterations": [i.to_json() for i in self.iterations],
            "fingerprints_per_iteration": [list(f) for f in self.fingerprints_per_iteration],
            "tests_fixed": list(self.tests_fixed), "flaky_tests": list(self.flaky_tests),
            "tests_edited": list(self.tests_edited), "unverified_failures": self.unverified_failures,
            "new_failures": [f.to_json() for f in self.new_failures], "triage": [t.to_json() for t in self.triage],
            "decision_point": self.decision_point.to_json() if self.decision_point is not None else None,
            "handoff": plain_json(self.handoff), "repair": plain_json(self.repair),
            **({"regression_check": plain_json(self.regression_check)} if self.regression_check is not None else {}),
            **plain_json(self.extra),
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
class Report(_ReadBack):
    """A whole report (docs/report.md "JSON"): its config and their origins, its incidents and
    the plan-level fields derived from them (``report.outcome.assemble_report``); or the
    records of a report JSON, read tolerantly by :meth:`from_json` (checked first by
    :meth:`read` when it comes from a file)."""

    CHECKED: ClassVar[tuple[Field, ...]] = _required(
        schema_version=integer, title=any_value, enabled=boolean, effective_config=json_object, origins=json_object,
        auto_tasks_looped=any_value, total_retries=any_value, incidents=array_of(ReportIncident.check),
        stop_reason=any_value, final_status=any_value, recommended_next_action=any_value)
    WRITTEN: ClassVar[tuple[str, ...]] = ("schema_version", "title")

    enabled: bool
    effective_config: Mapping[str, object]
    origins: Mapping[str, str]
    incidents: tuple[ReportIncident, ...]
    auto_tasks_looped: int  # plan actions with at least one attempt
    total_retries: int  # the incidents' loops_used
    stop_reason: Optional[str]  # the deciding incident's
    final_status: Optional[str]
    recommended_next_action: str
    deciding_incident: Optional[str] = None
    triage_summary: Optional[Mapping[str, object]] = None  # {counts, line}
    config_differences: tuple[ConfigDifference, ...] = ()
    shards: tuple[Shard, ...] = ()
    extra: FrozenObject = field(default_factory=empty_map)  # e.g. the ``ci`` block of ``selfheal ci``, as read

    @property
    def triage_line(self) -> Optional[str]:
        """The triage's one line for the headline (``2 new, 1 known on main``), if any."""
        return opt_str(self.triage_summary.get("line")) if self.triage_summary is not None else None

    @classmethod
    def read(cls, data: Any, source: str = "report") -> Report:
        """The records of a report JSON read back from ``source`` (a file, a shard) if this
        version can render and merge it: ``schema_version`` gated, then the keys and types of
        docs/report.md "Validation" checked; else ``InputError`` naming ``source`` and the
        first bad field, in one line."""
        if not isinstance(data, dict):
            raise InputError(f"{source}: expected a JSON object (a report from selfheal report --format json)")
        version = data.get("schema_version")
        if isinstance(version, bool) or version != REPORT_SCHEMA_VERSION:
            raise InputError(f"{source}: unsupported report schema_version {json.dumps(version)} "
                             f"(expected {REPORT_SCHEMA_VERSION})")
        try:
            cls.check(data, "")
        except FieldError as exc:
            raise InputError(one_line(f"{source}: invalid report: {exc}")) from None
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Report:
        """The records of a report JSON (a file read back, the ``selfheal ci`` document), read tolerantly."""
        triage = data.get("triage_summary")
        final_status = data.get("final_status")
        origins = data.get("origins")
        return cls(
            enabled=bool(data.get("enabled")), effective_config=_mapping(data.get("effective_config")) or empty_map(),
            origins={str(k): str(v) for k, v in origins.items()} if isinstance(origins, Mapping) else {},
            incidents=tuple(ReportIncident.from_json(e) for e in dicts(data.get("incidents"))),
            auto_tasks_looped=_count(data.get("auto_tasks_looped")), total_retries=_count(data.get("total_retries")),
            stop_reason=opt_str(data.get("stop_reason")) or None,
            final_status=None if final_status is None else str(final_status),
            recommended_next_action=as_str(data.get("recommended_next_action")),
            deciding_incident=opt_str(data.get("deciding_incident")),
            triage_summary=_mapping(triage),
            config_differences=tuple(ConfigDifference.from_json(d) for d in dicts(data.get("config_differences"))),
            shards=tuple(Shard.from_json(s) for s in dicts(data.get("shards"))),
            extra=cls.unknown(data),
        )

    def to_json(self) -> dict[str, object]:
        """The report JSON (docs/report.md "JSON"): what ``selfheal report --json`` prints."""
        return {
            "schema_version": REPORT_SCHEMA_VERSION, "title": REPORT_TITLE, "enabled": self.enabled,
            "effective_config": plain_json(self.effective_config), "origins": dict(self.origins),
            "config_differences": [d.to_json() for d in self.config_differences],
            "shards": [s.to_json() for s in self.shards], "incidents": [e.to_json() for e in self.incidents],
            "auto_tasks_looped": self.auto_tasks_looped, "total_retries": self.total_retries,
            "triage_summary": plain_json(self.triage_summary), "stop_reason": self.stop_reason,
            "final_status": self.final_status, "recommended_next_action": self.recommended_next_action,
            "deciding_incident": self.deciding_incident, **plain_json(self.extra),
        }


# The report as its callers hold it: the records, or its JSON (the ``selfheal ci`` document).
ReportInput = Union[Report, Mapping[str, Any]]


def as_report(report: ReportInput) -> Report:
    """The records of ``report``: ``report`` itself, or read tolerantly from its JSON."""
    return report if isinstance(report, Report) else Report.from_json(report)
