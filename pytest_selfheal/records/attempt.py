"""``attempt_XX.json`` as a record: ``Attempt`` with its ``RepairBlock`` and ``Decision``
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
class Decision(JsonRecord):
    """What the loop policy decided after the latest observation, and why; recorded as is
    (every key optional when read)."""

    action: str = ""  # continue | stop
    stop_reason: Optional[str] = None
    final_status: Optional[str] = None  # resolved | escalated | replan_requested; None = left open
    progress: Optional[bool] = None
    progress_reasons: tuple[str, ...] = ()  # tests_fixed | fingerprint_changed | diff_changed, or why not judged
    fingerprint_changed: Optional[bool] = None  # judged another failure, not a repeat
    tests_fixed: tuple[str, ...] = ()  # node ids failing (or missing) before and passing now
    same_error_repeats: int = 0  # consecutive sightings (capture included) of the current fingerprint set
    no_progress_streak: int = 0  # consecutive no-progress iterations (the capture counts as one)
    retry_timeout: Optional[bool] = None  # this iteration timed out and its one retry is still allowed
    message: str = ""  # one human sentence explaining the decision
    iteration: int = 0  # verification iterations so far (the capture is 0)
    conditions: tuple[str, ...] = ()  # every stop condition that held, in precedence order

    @property
    def stopped(self) -> bool:
        return self.action == "stop"


@dataclass(frozen=True)
class RepairBlock(JsonRecord):
    """What one repair provider call did (docs/repair.md "What one repair call records")."""

    KIND: ClassVar[str] = "repair"

    provider: str = ""
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

    incident_id: Annotated[str, incident_id]
    iteration: Annotated[int, checked(integer, minimum=1)]  # counts across loop runs; XX in the file name
    started_at: Annotated[str, timestamp]
    finished_at: Annotated[str, timestamp]
    actions_applied: tuple[str, ...]  # plan action ids the repair touched; () in verify-only mode
    verification_commands: tuple[str, ...]
    verification_passed: bool
    result: Annotated[str, checked(string, enum=("continue", "stop"))]
    error_signature: Optional[str]  # the first failure's signature, None without failures
    mode: Annotated[Optional[str], checked(string, enum=("verify", "agent", "repair"))] = None
    stop_reason: Annotated[Optional[str], nullable(checked(string, enum=StopReason))] = None
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
    decision: Optional[Decision] = None
    # Test files the verified code differs in from the user's (repair) or the capture's
    # (agent mode) state: a pass with them is `tests_edited`, never `success`.
    tests_edited: tuple[str, ...] = ()
    # What changed in the incident's seal since the capture (named): never `success`.
    harness_changed: tuple[str, ...] = ()
    # The regression check (loop/regression.py): how many tests it ran (None: it did not run)
    # and the tests the change broke, whose failures are in ``failures``.
    regression_tests_run: Annotated[Optional[int], checked(integer, minimum=0)] = None
    regressions: tuple[str, ...] = ()
