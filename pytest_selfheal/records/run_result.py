"""``run_result.json`` as a record: ``RunResult`` with ``DecisionPoint``, ``Handoff`` and ``RunRepair`` (docs/store.md). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from pytest_selfheal.records.attempt import RecordedDecision
from pytest_selfheal.records.jsondoc import (
    Extra,
    Field,
    FingerprintsEntry,
    JsonRecord,
    array_of,
    boolean,
    checked,
    empty_map,
    fingerprints_per_iteration,
    incident_id,
    integer,
    json_array,
    json_object,
    nullable,
    number,
    object_of,
    one_of,
    string,
    strings,
)
from pytest_selfheal.records.vocab import FinalStatus, StopReason


@dataclass(frozen=True)
class DecisionOption(JsonRecord):
    """One choice offered at a decision point: ``{id, label, command}``."""

    KIND: ClassVar[str] = "decision option"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("id", string),
        Field("label", string),
        Field("command", nullable(string)),
    )

    id: str = ""
    label: str = ""
    command: Optional[str] = None  # a suggested shell line for a human; None when there is none
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class DecisionContext(JsonRecord):
    """The decision point's ``context`` (camelCase keys, as the decision-point contract names them)."""

    KIND: ClassVar[str] = "decision context"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("iteration", integer),
        Field("remaining", integer),
        Field("failureSignature", nullable(string), attr="failure_signature"),
        Field("fingerprint", nullable(string)),
        Field("pendingScopeFiles", strings, attr="pending_scope_files"),
    )

    iteration: int = 0
    remaining: int = 0  # iterations left under max_iterations
    failure_signature: Optional[str] = None
    fingerprint: Optional[str] = None  # the last seen primary fingerprint
    pending_scope_files: tuple[str, ...] = ()
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class DecisionPoint(JsonRecord):
    """What a human may do next, written at every stop: ``{reason, message, options, context}``."""

    KIND: ClassVar[str] = "decision point"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("reason", string),
        Field("message", string),
        Field("options", array_of(DecisionOption.parse)),
        Field("context", DecisionContext.parse),
    )

    reason: str = ""  # the stop reason
    message: str = ""
    options: tuple[DecisionOption, ...] = ()
    context: Optional[DecisionContext] = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class Handoff(JsonRecord):
    """The structured handoff written at every stop: what was tried and what is left."""

    KIND: ClassVar[str] = "handoff"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("iterations", checked(integer, minimum=0)),
        Field("stop_reason", nullable(string)),
        Field("fingerprints_per_iteration", fingerprints_per_iteration),
        Field("fixed", json_array),
        Field("flaky_tests", strings),
        Field("recommended_next_action", string),
    )

    iterations: int = 0
    stop_reason: Optional[str] = None
    fingerprints_per_iteration: tuple[FingerprintsEntry, ...] = ()  # index 0 = the capture
    fixed: tuple[Any, ...] = ()  # the tests that failed and now pass (node ids)
    flaky_tests: tuple[str, ...] = ()
    recommended_next_action: str = ""
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class RunRepair(JsonRecord):
    """The end of a loop with a repair provider (docs/repair.md "The end of the loop")."""

    KIND: ClassVar[str] = "run repair"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("final_patch", nullable(string)),
        Field("applied", boolean),
        Field("applied_at", string),
        Field("applied_to", string),
        Field("apply_command", nullable(string)),
        Field("files_changed", strings),
        Field("message", string),
        Field("provider_calls", integer),
    )

    final_patch: Optional[str] = None  # final.patch, None when nothing was accepted
    applied: Optional[bool] = None
    applied_at: Optional[str] = None
    applied_to: Optional[str] = None
    apply_command: Optional[str] = None
    files_changed: tuple[str, ...] = ()
    message: str = ""
    provider_calls: int = 0
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class RunResult(JsonRecord):
    """``error_runs/<id>/run_result.json``: how a loop run ended."""

    KIND: ClassVar[str] = "run_result"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("incident_id", incident_id, required=True),
        Field(
            "final_status",
            one_of(FinalStatus, FinalStatus.RESOLVED, FinalStatus.ESCALATED, FinalStatus.REPLAN_REQUESTED),
            required=True,
        ),
        Field("loops_used", checked(integer, minimum=0), required=True),
        Field("runtime_minutes", checked(number, minimum=0), required=True),
        Field("same_error_repeats", checked(integer, minimum=0), required=True),
        Field(
            "archived_to",
            checked(
                nullable(string),
                description=(
                    "Relative to the reports root, e.g. error_archive/resolved/<id>; null when not archived"
                    " (replan_requested)."
                ),
            ),
            required=True,
        ),
        Field("stop_reason", nullable(one_of(StopReason))),
        Field("message", string),
        Field("iteration", integer),
        Field("flaky_tests", strings),
        Field("tests_fixed", strings),
        Field("fingerprints_per_iteration", fingerprints_per_iteration),
        Field("decision_point", nullable(DecisionPoint.parse)),
        Field("handoff", nullable(Handoff.parse)),
        Field("decision", RecordedDecision.parse),
        Field("effective_config", json_object),
        Field("effective_config_origins", object_of(string)),
        Field("repair", nullable(RunRepair.parse)),
    )

    incident_id: str
    final_status: FinalStatus  # resolved | escalated | replan_requested
    loops_used: int  # the verification iterations of this loop run (docs/store.md)
    runtime_minutes: float
    same_error_repeats: int
    archived_to: Optional[str]  # error_archive/<bucket>/<id>, None when not archived
    stop_reason: Optional[StopReason] = None
    message: Optional[str] = None
    iteration: Optional[int] = None  # the last attempt number; 0 without attempts
    flaky_tests: tuple[str, ...] = ()
    tests_fixed: tuple[str, ...] = ()
    fingerprints_per_iteration: tuple[FingerprintsEntry, ...] = ()  # index 0 = the capture
    decision_point: Optional[DecisionPoint] = None
    handoff: Optional[Handoff] = None
    decision: Optional[RecordedDecision] = None
    effective_config: Mapping[str, Any] = field(default_factory=empty_map)  # ralf_lite values, secrets redacted
    effective_config_origins: Mapping[str, str] = field(default_factory=empty_map)  # {dotted key: file or flag}
    repair: Optional[RunRepair] = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class LoopResult(RunResult):
    """What :func:`pytest_selfheal.run.entry.run_incident_loop` returns: the run result of
    the stop, or for a stop that decided nothing (``disabled``, ``cancelled``) the same
    shape with ``final_status`` None, never written to disk."""

    KIND: ClassVar[str] = "loop result"
    FIELDS: ClassVar[tuple[Field, ...]] = tuple(
        Field("final_status", nullable(one_of(FinalStatus)), required=True) if f.key == "final_status" else f
        for f in RunResult.FIELDS
    )

    final_status: Optional[FinalStatus]  # type: ignore[assignment]  # None: the incident stays open
