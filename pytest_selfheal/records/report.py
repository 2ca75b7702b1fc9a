"""The report (``selfheal report``) as records, from the build to every rendering. Pure. A report
file is checked against them (:meth:`Report.read`), JSON given to a renderer is read leniently;
unknown keys (a newer version's, ``selfheal ci``'s ``ci`` block) stay in ``extra`` for a merge."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, Optional, Union

from pytest_selfheal.errors import InputError, one_line
from pytest_selfheal.records.incident import Triage
from pytest_selfheal.records.jsondoc import (
    REQUIRED,
    FieldError,
    FrozenObject,
    LenientRecord,
    empty_map,
    fields_of,
    json_object,
    lenient,
)
from pytest_selfheal.records.run_result import DecisionOption, DecisionPoint
from pytest_selfheal.records.tolerant import opt_str, strs

REPORT_SCHEMA_VERSION = 1
REPORT_TITLE = "RALF Lite Loop Report"


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
    """A decision point that does not fit the run result's record, read leniently."""
    options = data.get("options")
    return DecisionPoint(reason=opt_str(data.get("reason")) or "", message=_text(data.get("message")) or "",
                         options=tuple(_option(o) for o in options) if isinstance(options, list) else ())


@dataclass(frozen=True)
class ReportIteration(LenientRecord):
    """One verification of an incident (``incidents[].iterations``)."""

    iteration: Optional[int] = None  # None: a report read back gave no integer
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
class ReportTask(LenientRecord):
    """One plan action of an incident: its attempts and where it stopped."""

    task: str
    title: str = ""
    nodeids: tuple[str, ...] = ()
    attempts: Annotated[int, REQUIRED] = 0
    stop_reason: Annotated[Optional[str], REQUIRED] = None
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
class NewFailure(LenientRecord):
    """A failure outside the incident's selection, first seen in ``iteration`` (as read)."""

    nodeid: Optional[str] = None
    fingerprint: Optional[str] = None
    signature: Optional[str] = None
    failure_type: Optional[str] = None
    iteration: Any = None


@dataclass(frozen=True)
class TriageEntry(LenientRecord):
    """One captured failure's triage in the report (``incidents[].triage[]``): the failure's
    identity and its :class:`Triage` (turned ``flaky`` when the loop saw it pass on re-run)."""

    nodeid: Optional[str]
    fingerprint: Optional[str]
    failure_type: Optional[str]
    triage: Triage

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> TriageEntry:
        """The entry of a report JSON, read leniently: its identity, its triage beside it."""
        own, triage = ({f.name: lenient(f, data.get(f.key)) for f in fields_of(kind)} for kind in (cls, Triage))
        return cls(**{**own, "triage": Triage(**triage)})

    @classmethod
    def parse(cls, doc: Any, path: str) -> TriageEntry:
        return cls.from_json(json_object(doc, path))

    def to_json(self) -> dict[str, object]:
        triage = {spec.key: getattr(self.triage, spec.name) for spec in fields_of(Triage)}
        return {"fingerprint": self.fingerprint, "failure_type": self.failure_type, "nodeid": self.nodeid,
                **{key: value for key, value in triage.items() if value is not None}}


@dataclass(frozen=True, kw_only=True)
class ReportIncident(LenientRecord):
    """One incident of the report JSON (docs/report.md "JSON"); ``run_config``, ``handoff`` and
    ``repair`` are JSON copied from the run result (their keys are the user's or another stage's)."""

    OMITTED: ClassVar[tuple[str, ...]] = ("regression_check",)

    incident_id: str
    status: str
    bucket: Optional[str]
    created_at: Optional[str] = None
    step: Optional[str] = None
    failure_class: Optional[str] = None
    error_signature: Optional[str] = None
    capture_tests: tuple[str, ...] = ()
    plan_revision: Optional[int] = None
    finished: bool = True  # absent in a report of an older version: finished
    final_status: Optional[str]
    stop_reason: Optional[str]
    loops_used: int
    same_error_repeats: Any = None
    runtime_minutes: Optional[float] = None
    archived_to: Optional[str] = None
    run_config: Optional[FrozenObject] = None
    tasks: tuple[ReportTask, ...]
    iterations: tuple[ReportIteration, ...]
    fingerprints_per_iteration: tuple[tuple[str, ...], ...]
    tests_fixed: tuple[str, ...]
    flaky_tests: tuple[str, ...]
    tests_edited: tuple[str, ...] = ()
    unverified_failures: int = 0
    new_failures: tuple[NewFailure, ...] = ()
    triage: tuple[TriageEntry, ...] = ()
    decision_point: Optional[DecisionPoint] = None
    handoff: FrozenObject = field(default_factory=empty_map)
    repair: Optional[FrozenObject] = None  # what the repair did (None: no provider ran)
    # The last regression check: {"tests_run": N, "broken": [node ids]} (None: none ran).
    regression_check: Optional[FrozenObject] = None

    @classmethod
    def from_json(cls, doc: FrozenObject) -> ReportIncident:
        entry = super().from_json(doc)
        point = doc.get("decision_point")
        if entry.decision_point is None and isinstance(point, Mapping):
            return replace(entry, decision_point=_decision_point(point))
        return entry

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
class Shard(LenientRecord):
    """One shard of a merged report (``shards[]``)."""

    name: str
    incidents: tuple[str, ...] = ()  # the incidents the merge took from it
    duplicates: tuple[str, ...] = ()  # those already in an earlier shard
    stop_reason: Any = None  # the shard's plan-level values, as read
    final_status: Any = None
    total_retries: Any = None


@dataclass(frozen=True)
class ConfigDifference(LenientRecord):
    """A shard whose config differs from the first shard's (``config_differences[]``)."""

    shard: str
    keys: tuple[str, ...]
    values: FrozenObject  # {dotted key: the shard's value}, JSON


@dataclass(frozen=True)
class Report(LenientRecord):
    """A whole report (docs/report.md "JSON"): its config, its incidents and the plan-level
    fields derived from them."""

    WRITTEN: ClassVar[tuple[str, ...]] = ("schema_version", "title")

    enabled: bool
    effective_config: FrozenObject
    origins: Mapping[str, str]
    incidents: tuple[ReportIncident, ...]
    auto_tasks_looped: int  # plan actions with at least one attempt
    total_retries: int  # the incidents' loops_used
    stop_reason: Optional[str]  # the deciding incident's
    final_status: Optional[str]
    recommended_next_action: str
    deciding_incident: Optional[str] = None
    triage_summary: Optional[FrozenObject] = None  # {counts, line}
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
            return cls.parse(data, "")
        except FieldError as exc:
            raise InputError(one_line(f"{source}: invalid report: {exc}")) from None


# The report as its callers hold it: the records, or its JSON (the ``selfheal ci`` document).
ReportInput = Union[Report, FrozenObject]


def as_report(report: ReportInput) -> Report:
    """The records of ``report``: ``report`` itself, or read tolerantly from its JSON."""
    return report if isinstance(report, Report) else Report.from_json(report)
