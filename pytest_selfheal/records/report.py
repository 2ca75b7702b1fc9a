"""The report (``selfheal report``) as records: one model from the build to every rendering. Pure.

Each record writes its JSON (``to_json``) and reads it back tolerantly (``from_json``: a value
of the wrong type reads as its default, so one odd entry never stops a report). A report read
from a file is checked first (:meth:`Report.read`); the keys a record does not know (a newer
version's, the ``ci`` block of ``selfheal ci``) are kept in ``extra`` so a merge carries them.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Optional, TypeVar, Union, cast

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
    dataclass_json,
    empty_map,
    field_defaults,
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


@dataclass(frozen=True)
class _ReadBack:
    """A report record: its fields are its JSON keys. ``CHECKED``: the keys its JSON must have
    and the types they must have when present (docs/report.md "Validation"); ``WRITTEN``: keys
    written that are not fields; ``OMITTED``: fields written only when not None."""

    CHECKED: ClassVar[tuple[Field, ...]] = ()
    WRITTEN: ClassVar[tuple[str, ...]] = ()
    OMITTED: ClassVar[tuple[str, ...]] = ()

    extra: FrozenObject = field(default_factory=empty_map, kw_only=True)

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
    def from_json(cls: type[B], data: Mapping[str, object]) -> B:
        """The record of a report JSON, read tolerantly; unknown keys go to ``extra``."""
        values: dict[str, Any] = {}
        for name, (kind, default) in _fields(cls).items():
            if name in data or default is dataclasses.MISSING:
                values[name] = _read(kind, data.get(name), required=default is dataclasses.MISSING)
        known = _fields(cls).keys() | set(cls.WRITTEN)
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**values, extra=freeze(extra) if extra else empty_map())

    def to_json(self) -> dict[str, object]:
        doc = {key: value for key, value in dataclass_json(self).items() if key != "extra"
               and (value is not None or key not in self.OMITTED)}
        return {**doc, **plain_json(self.extra)}


B = TypeVar("B", bound=_ReadBack)


def _record_fields(cls: type) -> dict[str, tuple[Any, Any]]:
    """``{field: (type, default)}`` of a report record, ``extra`` aside."""
    hints, defaults = typing.get_type_hints(cls), field_defaults(cls)
    return {f.name: (hints[f.name], defaults.get(f.name, dataclasses.MISSING))
            for f in dataclasses.fields(cls) if f.name != "extra"}


_fields = cast("Callable[[type], dict[str, tuple[Any, Any]]]", cache(_record_fields))  # once per class


def _read(kind: Any, value: object, *, required: bool = False) -> Any:
    """``value`` read tolerantly as a field of type ``kind``: a value of the wrong type reads as
    None (an optional field) or empty; a required string is whatever was there, as a string."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:  # Optional[X]
        inner = next(arg for arg in args if arg is not type(None))
        if value is None:
            return None
        if inner is str:
            return value if isinstance(value, str) and value else None
        if inner is bool:
            return bool(value)
        if inner is int:
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if inner is float:
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if not isinstance(value, Mapping):
            return None
        return _decision_point(value) if inner is DecisionPoint else _read(inner, value)
    if kind is str:
        return str(value) if required and value is not None else as_str(value)
    if kind is bool:
        return bool(value)
    if kind is int:
        return int(value) if isinstance(value, float) and value.is_integer() else as_int(value)
    if origin is tuple:
        item = args[0]
        if item is str:
            return tuple(strs(value))
        if typing.get_origin(item) is tuple:
            return tuple(tuple(strs(v)) for v in value) if isinstance(value, list) else ()
        return tuple(item.from_json(v) for v in dicts(value))
    if origin is Mapping and args[1] is str:
        return {str(k): str(v) for k, v in value.items() if v is not None} if isinstance(value, Mapping) else {}
    if origin is Mapping:
        return freeze({str(k): v for k, v in value.items()}) if isinstance(value, Mapping) else empty_map()
    return freeze(value)


def _text(value: object) -> Optional[str]:
    """``str(value)`` when ``value`` is truthy, else None: how a report read back shows a value."""
    return str(value) if value else None


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
    """One verification of an incident (``incidents[].iterations``)."""

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


@dataclass(frozen=True)
class ReportTask(_ReadBack):
    """One plan action of an incident: its attempts and where it stopped."""

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
    label: str = ""  # ``A1 (…ab12cd)`` when a task id repeats across the report's incidents; else the task id

    OMITTED: ClassVar[tuple[str, ...]] = ("where", "also_where")

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.task)


@dataclass(frozen=True)
class NewFailure(_ReadBack):
    """A failure outside the incident's selection, first seen in ``iteration`` (as read)."""

    nodeid: Optional[str]
    fingerprint: Optional[str]
    signature: Optional[str]
    failure_type: Optional[str]
    iteration: object


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
        """The entry of a report JSON, read tolerantly (each field as its type, else empty)."""
        evidence = {spec.name: _lenient(spec, data.get(spec.key)) for spec in fields_of(Triage) if not spec.required}
        return cls(nodeid=opt_str(data.get("nodeid")), fingerprint=opt_str(data.get("fingerprint")),
                   failure_type=opt_str(data.get("failure_type")),
                   triage=Triage(as_str(data.get("label")), as_str(data.get("detail")), **evidence))

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"fingerprint": self.fingerprint, "failure_type": self.failure_type,
                                  "nodeid": self.nodeid}
        for spec in fields_of(Triage):
            value = getattr(self.triage, spec.key)
            if value is not None:
                doc[spec.key] = value
        return doc


@dataclass(frozen=True, kw_only=True)
class ReportIncident(_ReadBack):
    """One incident of the report JSON (docs/report.md "JSON"). ``run_config``, ``handoff``
    and ``repair`` are JSON copied from the run result (their keys are the user's or another
    stage's)."""

    # The keys the merge and the renderer rely on.
    CHECKED: ClassVar[tuple[Field, ...]] = _required(
        incident_id=string, status=any_value, bucket=any_value, final_status=any_value, stop_reason=any_value,
        loops_used=integer, tasks=array_of(ReportTask.check), iterations=array_of(ReportIteration.check),
        fingerprints_per_iteration=json_array, tests_fixed=json_array, flaky_tests=json_array)
    OMITTED: ClassVar[tuple[str, ...]] = ("regression_check",)

    incident_id: str
    status: str
    bucket: Optional[str]
    created_at: Optional[str]
    step: Optional[str]
    failure_class: Optional[str]
    error_signature: Optional[str]
    capture_tests: tuple[str, ...]
    plan_revision: Optional[int]
    finished: bool = True  # absent in a report of an older version: finished
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

    @property
    def capture_fingerprints(self) -> tuple[str, ...]:
        return self.fingerprints_per_iteration[0] if self.fingerprints_per_iteration else ()

    @property
    def next_action(self) -> Optional[str]:
        return _text(self.handoff.get("recommended_next_action"))

    @property
    def repair_summary(self) -> tuple[str, ...]:
        """What the repair did, one sentence per call and its end (empty: no provider ran)."""
        return tuple(strs((self.repair or {}).get("summary")))


@dataclass(frozen=True)
class Shard(_ReadBack):
    """One shard of a merged report (``shards[]``)."""

    name: str
    incidents: tuple[str, ...] = ()  # the incidents the merge took from it
    duplicates: tuple[str, ...] = ()  # those already in an earlier shard
    stop_reason: object = None  # the shard's plan-level values, as read
    final_status: object = None
    total_retries: object = None


@dataclass(frozen=True)
class ConfigDifference(_ReadBack):
    """A shard whose config differs from the first shard's (``config_differences[]``)."""

    shard: str
    keys: tuple[str, ...]
    values: Mapping[str, object]  # {dotted key: the shard's value}, JSON


@dataclass(frozen=True)
class Report(_ReadBack):
    """A whole report (docs/report.md "JSON"): its config, its incidents and the plan-level
    fields derived from them."""

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

    def to_json(self) -> dict[str, object]:
        return {"schema_version": REPORT_SCHEMA_VERSION, "title": REPORT_TITLE, **super().to_json()}

    @property
    def triage_line(self) -> Optional[str]:
        """The triage's one line for the headline (``2 new, 1 known on main``), if any."""
        return opt_str(self.triage_summary.get("line")) if self.triage_summary is not None else None

    @classmethod
    def read(cls, data: Any, source: str = "report") -> Report:
        """The records of a report JSON read from ``source`` (a file, a shard) if this version can
        render and merge it, else a one-line ``InputError`` naming ``source`` and the first bad field."""
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


# The report as its callers hold it: the records, or its JSON (the ``selfheal ci`` document).
ReportInput = Union[Report, Mapping[str, Any]]


def as_report(report: ReportInput) -> Report:
    """The records of ``report``: ``report`` itself, or read tolerantly from its JSON."""
    return report if isinstance(report, Report) else Report.from_json(report)
