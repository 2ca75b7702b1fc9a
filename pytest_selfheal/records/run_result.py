"""``run_result.json`` as a record: ``RunResult`` with ``DecisionPoint``, ``Handoff`` and ``RunRepair`` (docs/store.md). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Optional

from pytest_selfheal.records.attempt import Decision
from pytest_selfheal.records.jsondoc import (
    FingerprintsEntry,
    JsonKey,
    JsonRecord,
    checked,
    empty_map,
    fingerprints_per_iteration,
    incident_id,
    integer,
    nullable,
    number,
    one_of,
    string,
)
from pytest_selfheal.records.vocab import FinalStatus, StopReason


@dataclass(frozen=True)
class DecisionOption(JsonRecord):
    """One choice offered at a decision point: ``{id, label, command}``."""

    id: str = ""
    label: str = ""
    command: Optional[str] = None  # a suggested shell line for a human; None when there is none


@dataclass(frozen=True)
class DecisionContext(JsonRecord):
    """The decision point's ``context`` (camelCase keys, as the decision-point contract names them)."""

    iteration: int = 0
    remaining: int = 0  # iterations left under max_iterations
    failure_signature: Annotated[Optional[str], JsonKey("failureSignature")] = None
    fingerprint: Optional[str] = None  # the last seen primary fingerprint
    pending_scope_files: Annotated[tuple[str, ...], JsonKey("pendingScopeFiles")] = ()


@dataclass(frozen=True)
class DecisionPoint(JsonRecord):
    """What a human may do next, written at every stop: ``{reason, message, options, context}``."""

    reason: str = ""  # the stop reason
    message: str = ""
    options: tuple[DecisionOption, ...] = ()
    context: Optional[DecisionContext] = None


@dataclass(frozen=True)
class Handoff(JsonRecord):
    """The structured handoff written at every stop: what was tried and what is left."""

    iterations: Annotated[int, checked(integer, minimum=0)] = 0
    stop_reason: Optional[str] = None
    # index 0 = the capture
    fingerprints_per_iteration: Annotated[tuple[FingerprintsEntry, ...], fingerprints_per_iteration] = ()
    fixed: tuple[Any, ...] = ()  # the tests that failed and now pass (node ids)
    flaky_tests: tuple[str, ...] = ()
    recommended_next_action: str = ""


@dataclass(frozen=True)
class RunRepair(JsonRecord):
    """The end of a loop with a repair provider (docs/repair.md "The end of the loop")."""

    final_patch: Optional[str] = None  # final.patch, None when nothing was accepted
    applied: Optional[bool] = None
    applied_at: Optional[str] = None
    applied_to: Optional[str] = None
    apply_command: Optional[str] = None
    files_changed: tuple[str, ...] = ()
    message: str = ""
    provider_calls: int = 0


@dataclass(frozen=True)
class RunResult(JsonRecord):
    """``error_runs/<id>/run_result.json``: how a loop run ended."""

    KIND: ClassVar[str] = "run_result"

    incident_id: Annotated[str, incident_id]
    final_status: Annotated[FinalStatus, one_of(
        FinalStatus, FinalStatus.RESOLVED, FinalStatus.ESCALATED, FinalStatus.REPLAN_REQUESTED
    )]
    loops_used: Annotated[int, checked(integer, minimum=0)]  # the verification iterations of this loop run
    runtime_minutes: Annotated[float, checked(number, minimum=0)]
    same_error_repeats: Annotated[int, checked(integer, minimum=0)]
    archived_to: Annotated[Optional[str], checked(
        nullable(string),
        description=(
            "Relative to the reports root, e.g. error_archive/resolved/<id>; null when not archived"
            " (replan_requested)."
        ),
    )]
    stop_reason: Annotated[Optional[StopReason], nullable(one_of(StopReason))] = None
    message: Optional[str] = None
    iteration: Optional[int] = None  # the last attempt number; 0 without attempts
    flaky_tests: tuple[str, ...] = ()
    tests_fixed: tuple[str, ...] = ()
    # index 0 = the capture
    fingerprints_per_iteration: Annotated[tuple[FingerprintsEntry, ...], fingerprints_per_iteration] = ()
    decision_point: Optional[DecisionPoint] = None
    handoff: Optional[Handoff] = None
    decision: Optional[Decision] = None
    effective_config: Mapping[str, Any] = field(default_factory=empty_map)  # ralf_lite values, secrets redacted
    effective_config_origins: Mapping[str, str] = field(default_factory=empty_map)  # {dotted key: file or flag}
    repair: Optional[RunRepair] = None


@dataclass(frozen=True)
class LoopResult(RunResult):
    """What ``run_incident_loop`` returns: the run result, ``final_status`` None for a stop that
    decided nothing (``disabled``, ``cancelled``); never written to disk."""

    final_status: Optional[FinalStatus]  # type: ignore[assignment]  # None: the incident stays open
