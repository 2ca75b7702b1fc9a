"""The report JSON (``selfheal report --format json``) as a record: what ``merge`` and ``--comment-from`` accept.

:class:`ReportDoc` declares the fields a report read back from a file must have, with
their types (docs/report.md "Validation"); every other key is kept as read, so
``ReportDoc.from_json(doc, where).to_json()`` is ``doc`` again. The ``schema_version``
gate stays with ``report.data.validate_report``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, ClassVar, Optional

from pytest_selfheal.records.frozen import dataclass
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
