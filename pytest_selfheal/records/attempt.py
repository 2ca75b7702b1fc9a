"""``attempt_XX.json`` as a record: ``Attempt`` with its ``RepairBlock`` and ``RecordedDecision``
(the loop's whole decision, which ``run_result.json`` carries too) (docs/store.md). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Optional

from pytest_selfheal.records.incident import Failure
from pytest_selfheal.records.jsondoc import (
    JsonRecord,
    checked,
    empty_map,
    incident_id,
    integer,
    nullable,
    number,
    object_of,
    string,
    timestamp,
)
from pytest_selfheal.records.vocab import OUTCOMES, StopReason


@dataclass(frozen=True)
class RecordedDecision(JsonRecord):
    """The loop's decision after one observation, as recorded (every key optional)."""

    KIND: ClassVar[str] = "decision"

    action: str = ""  # continue | stop
    stop_reason: Optional[str] = None
    final_status: Optional[str] = None  # resolved | escalated | replan_requested; None = left open
    progress: Optional[bool] = None
    progress_reasons: tuple[str, ...] = ()
    fingerprint_changed: Optional[bool] = None
    tests_fixed: tuple[str, ...] = ()
    same_error_repeats: int = 0
    no_progress_streak: int = 0
    retry_timeout: Optional[bool] = None
    message: str = ""
    iteration: int = 0
    conditions: tuple[str, ...] = ()  # every stop condition that held, in precedence order


@dataclass(frozen=True)
class RepairBlock(JsonRecord):
    """What one repair provider call did (docs/repair.md "What one repair call records")."""

    KIND: ClassVar[str] = "repair"

    provider: str = ""
    # diff | no_fix_found | timeout | crashed
    result: Annotated[str, checked(string, enum=("diff", "no_fix_found", "timeout", "crashed"))] = ""
    files_changed: tuple[str, ...] = ()
    patch: Optional[str] = None  # attempt_XX.patch, None when nothing changed
    scope_denied: Optional[bool] = None
    out_of_scope: tuple[str, ...] = ()
    exit_code: Optional[int] = None
    duration_seconds: Optional[float] = None
    message: str = ""
    actions_applied: tuple[str, ...] = ()
    prompt: Optional[str] = None
    log: Optional[str] = None
    worktree: Optional[str] = None
    # Test files the worktree's code differs in from the user's state after this call: a
    # selection passing with them is `tests_edited`, never `success` (docs/repair.md).
    tests_edited: tuple[str, ...] = ()


@dataclass(frozen=True)
class Attempt(JsonRecord):
    """``error_runs/<id>/attempt_XX.json``: the record of one iteration."""

    KIND: ClassVar[str] = "attempt"

    incident_id: Annotated[str, incident_id]
    # the attempt number, counting across loop runs; equals XX in the file name
    iteration: Annotated[int, checked(integer, minimum=1)]
    started_at: Annotated[str, timestamp]
    finished_at: Annotated[str, timestamp]
    actions_applied: tuple[str, ...]  # plan action ids the repair touched; () in verify-only mode
    verification_commands: tuple[str, ...]
    verification_passed: bool
    result: Annotated[str, checked(string, enum=("continue", "stop"))]  # continue | stop
    error_signature: Optional[str]  # the first failure's signature, None without failures
    # verify | agent | repair
    mode: Annotated[Optional[str], checked(string, enum=("verify", "agent", "repair"))] = None
    stop_reason: Annotated[Optional[str], nullable(checked(string, enum=StopReason))] = None
    # {nodeid: outcome}
    outcomes: Annotated[Mapping[str, str], object_of(checked(string, enum=OUTCOMES))] = field(default_factory=empty_map)
    failures: tuple[Failure, ...] = ()  # of the selection
    new_failures: tuple[Failure, ...] = ()  # outside the incident's selection
    fingerprint_changed: Optional[bool] = None
    progress: Optional[bool] = None
    progress_reasons: tuple[str, ...] = ()
    tests_fixed: tuple[str, ...] = ()
    diff_hash: Optional[str] = None  # working-tree hash at verification time
    exit_code: Optional[int] = None  # the first non-zero exit code of the commands
    duration_seconds: Annotated[Optional[float], checked(number, minimum=0)] = None
    timed_out: Optional[bool] = None
    repair: Optional[RepairBlock] = None
    scope_denied: Optional[bool] = None
    same_error_repeats: Optional[int] = None
    decision: Optional[RecordedDecision] = None
    # Test files the verified code differs in from the user's (repair) or the capture's
    # (agent mode) state: a pass with them is `tests_edited`, never `success`.
    tests_edited: tuple[str, ...] = ()
    # What changed in the incident's seal since the capture (named): never `success`.
    harness_changed: tuple[str, ...] = ()
    # The regression check (loop/regression.py): how many tests it ran (None: it did not run)
    # and the tests the change broke, whose failures are in ``failures``.
    regression_tests_run: Annotated[Optional[int], checked(integer, minimum=0)] = None
    regressions: tuple[str, ...] = ()
