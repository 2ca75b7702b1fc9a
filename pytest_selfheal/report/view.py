"""The report JSON as records: what ``report.render`` reads. Pure.

A report JSON (``report.data.build_report``, ``report.merge``, or a file read back and
checked by ``parse_report``) is parsed here once, tolerantly (a field of the wrong type
reads as its default, as the renderer always did), into a tree of frozen records:
:class:`Report` → :class:`ReportIncident`; the records the report is built from are read
back with their own ``from_json`` (``records.report``'s ``ReportTask``, ``ReportIteration``,
``TriageEntry``, ``NewFailure``, ``Shard``, ``ConfigDifference``; the run result's
``DecisionPoint``). Only the config mappings stay JSON: their keys are the user's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from pytest_selfheal.records.report import (
    ConfigDifference,
    NewFailure,
    ReportDoc,
    ReportIteration,
    ReportTask,
    Shard,
    TriageEntry,
)
from pytest_selfheal.records.run_result import DecisionOption, DecisionPoint
from pytest_selfheal.records.tolerant import as_int, dicts, opt_str, strs

DASH = "—"


def _text(value: object, default: str = "") -> str:
    """``str(value)`` when ``value`` is truthy, else ``default`` (the renderer's ``x or default``)."""
    return str(value) if value else default


def _opt_bool(value: object) -> Optional[bool]:
    return None if value is None else bool(value)


def _number(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _mapping(value: object) -> Optional[Mapping[str, object]]:
    return {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else None


def _option(data: object) -> DecisionOption:
    """One option of a decision point read tolerantly; a bare value is its label alone."""
    if not isinstance(data, Mapping):
        return DecisionOption(label=str(data))
    return DecisionOption(id=opt_str(data.get("id")) or "", label=_text(data.get("label") or data.get("id"), DASH),
                          command=opt_str(data.get("command")))


def _decision_point(data: Mapping[str, object]) -> DecisionPoint:
    """The run result's decision point as the report carries it, read tolerantly."""
    options = data.get("options")
    return DecisionPoint(reason=opt_str(data.get("reason")) or "", message=_text(data.get("message")),
                         options=tuple(_option(o) for o in options) if isinstance(options, list) else ())


@dataclass(frozen=True)
class ReportIncident:
    """One incident of the report: its outcome, tasks, iterations and tests."""

    incident_id: str
    status: str
    final_status: Optional[str]
    stop_reason: Optional[str]
    loops_used: int
    finished: bool
    tasks: tuple[ReportTask, ...]
    iterations: tuple[ReportIteration, ...]
    capture_fingerprints: tuple[str, ...] = ()
    capture_tests: tuple[str, ...] = ()
    tests_fixed: tuple[str, ...] = ()
    flaky_tests: tuple[str, ...] = ()
    tests_edited: tuple[str, ...] = ()
    repair: tuple[str, ...] = ()  # what the repair did, one sentence per call and its end
    unverified_failures: int = 0
    same_error_repeats: Optional[str] = None
    runtime_minutes: Optional[float] = None
    archived_to: Optional[str] = None
    error_signature: Optional[str] = None
    triage: tuple[TriageEntry, ...] = ()
    new_failures: tuple[NewFailure, ...] = ()
    decision_point: Optional[DecisionPoint] = None
    next_action: str = DASH
    # The config the incident's run_result recorded (JSON: the user's keys).
    run_config: Optional[Mapping[str, object]] = None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ReportIncident:
        fpi = data.get("fingerprints_per_iteration")
        capture = strs(fpi[0]) if isinstance(fpi, list) and fpi else []
        repeats = data.get("same_error_repeats")
        point = data.get("decision_point")
        handoff = data.get("handoff") or {}
        final_status = data.get("final_status")
        return cls(
            incident_id=str(data.get("incident_id")), status=str(data.get("status")),
            final_status=None if final_status is None else str(final_status),
            stop_reason=opt_str(data.get("stop_reason")) or None, loops_used=as_int(data.get("loops_used")),
            finished=bool(data.get("finished")),
            tasks=tuple(ReportTask.from_json(t) for t in dicts(data.get("tasks"))),
            iterations=tuple(ReportIteration.from_json(i) for i in dicts(data.get("iterations"))),
            capture_fingerprints=tuple(capture), capture_tests=tuple(strs(data.get("capture_tests"))),
            tests_fixed=tuple(strs(data.get("tests_fixed"))), flaky_tests=tuple(strs(data.get("flaky_tests"))),
            tests_edited=tuple(strs(data.get("tests_edited"))),
            repair=tuple(strs((_mapping(data.get("repair")) or {}).get("summary"))),
            unverified_failures=as_int(data.get("unverified_failures")),
            same_error_repeats=None if repeats is None else str(repeats),
            runtime_minutes=_number(data.get("runtime_minutes")), archived_to=_text(data.get("archived_to")) or None,
            error_signature=_text(data.get("error_signature")) or None,
            triage=tuple(TriageEntry.from_json(t) for t in dicts(data.get("triage"))),
            new_failures=tuple(NewFailure.from_json(f) for f in dicts(data.get("new_failures"))),
            decision_point=_decision_point(point) if isinstance(point, Mapping) else None,
            next_action=_text(handoff.get("recommended_next_action"), DASH) if isinstance(handoff, Mapping) else DASH,
            run_config=_mapping(data.get("run_config")),
        )


@dataclass(frozen=True)
class Report:
    """A whole report: the plan-level outcome, the config and its origins, the incidents."""

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
            deciding_incident=_text(data.get("deciding_incident")) or None,
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
