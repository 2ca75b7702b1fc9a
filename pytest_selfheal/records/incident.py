"""``incident.json`` as a record (docs/store.md). ``Failure`` is the one record of a failing test:
the analysis builds it, the plan and the loop read it, an incident and an attempt write it. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Optional

from pytest_selfheal.records.jsondoc import (
    REQUIRED,
    JsonRecord,
    array_of,
    checked,
    empty_map,
    incident_id,
    integer,
    number,
    string,
    timestamp,
)
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.records.vocab import FAILURE_TYPES, OUTCOMES, IncidentStatus


@dataclass(frozen=True)
class CodeRef(JsonRecord):
    """A place in the code under test: a project file and a function or class in it (+ a line for a frame)."""

    KIND: ClassVar[str] = "code reference"

    path: str  # repo-relative POSIX path, never a test file
    name: str = ""  # qualified name (``Stack.push``)
    line: Optional[int] = None  # 1-based: a frame's line, a called function's ``def``
    bases: tuple[str, ...] = ()  # a called class: its project base classes as ``path::name``
    # a spectrum entry: its Ochiai score
    score: Annotated[Optional[float], checked(number, minimum=0, maximum=1)] = None


@dataclass(frozen=True)
class RootCause(JsonRecord):
    """A failure's root-cause evidence, resolved at capture inside pytest (docs/store.md)."""

    frame: Optional[CodeRef] = None  # the innermost traceback frame in the project outside the tests
    stack: tuple[CodeRef, ...] = ()  # the project frames on the way to it, outermost first
    test_line: Optional[CodeRef] = None  # the last test-file line of the traceback (the assertion)
    calls: tuple[CodeRef, ...] = ()  # the project functions and classes the test calls, where they are defined
    spectrum: Annotated[tuple[CodeRef, ...], checked(
        array_of(CodeRef.parse),
        description=(
            "With --selfheal-spectrum or after the loop's localisation run: the test's most suspicious"
            " functions (Ochiai over the run's failing and passing tests) and those its evidence names, most"
            " suspicious first."
        ),
    )] = ()
    exception: Annotated[Optional[str], checked(
        string, description="The exception's type when it is not an assertion's."
    )] = None
    raised: Annotated[Optional[CodeRef], checked(
        CodeRef.parse,
        description=(
            "Where that exception was raised when it was outside the project: a library's or the standard"
            " library's file (relative to its import root), function and line."
        ),
    )] = None


@dataclass(frozen=True)
class Triage(JsonRecord):
    """A captured failure's triage against the base branch's history: new, known, flaky or
    quarantined, and the evidence behind it (docs/history.md). Absent fields are left out."""

    label: str  # a TriageLabel (a plain string here: a label of a newer version still reads)
    detail: str  # one line a person reads: "first seen on main at abc1234 (2026-11-20), 3 times"
    first_seen_commit: Optional[str] = None
    first_seen_at: Optional[str] = None
    occurrences: Optional[int] = None
    flake_rate: Optional[float] = None
    quarantine_reason: Optional[str] = None
    base_branch: Optional[str] = None  # the branch "known" refers to


@dataclass(frozen=True)
class Failure(JsonRecord):
    """One failing test: its identity, fingerprint, classification and evidence (every key optional)."""

    nodeid: Optional[str] = None  # the pytest node id, when the plugin captured it
    test: str = ""  # runner-independent identity, classname::name
    outcome: Annotated[str, checked(string, enum=OUTCOMES)] = ""
    fingerprint: str = ""
    signature: str = ""
    scheme: Annotated[int, checked(integer, minimum=0)] = 0
    failure_type: Annotated[str, checked(string, enum=FAILURE_TYPES)] = ""
    code_fixable: Optional[bool] = None
    transient: Optional[bool] = None
    failure_class: str = ""
    message: str = ""
    target_paths: tuple[str, ...] = ()
    root_cause: Annotated[Optional[RootCause], checked(
        RootCause.parse,
        description=(
            "Root-cause evidence resolved at capture: the innermost project frame outside the tests, the"
            " project frames on the way to it, the test's failing line, and the project definitions the test"
            " calls; with --selfheal-spectrum, the functions it ran ranked by suspiciousness."
        ),
    )] = None
    triage: Optional[Triage] = None  # capture only: new, known, flaky or quarantined


# The keys a failure the analysis builds writes, in this order, null node id and empty target
# paths included; its root cause and triage, once set, follow.
CAPTURED_KEYS = ("test", "fingerprint", "signature", "scheme", "failure_type", "code_fixable", "transient",
                 "failure_class", "message", "outcome", "nodeid", "target_paths")


@dataclass(frozen=True, kw_only=True)
class Incident(JsonRecord):
    """``error_inbox/<id>/incident.json``: the contract fields, then the known extensions."""

    # The capture fills the failure fields; the store fills the empty identity and time
    # fields when it creates the incident (Store.create_incident).
    incident_id: Annotated[str, incident_id, REQUIRED] = ""
    # a copy of status.txt, which is authoritative
    status: Annotated[str, checked(string, enum=IncidentStatus), REQUIRED] = "new"
    created_at: Annotated[str, timestamp, REQUIRED] = ""
    updated_at: Annotated[str, timestamp, REQUIRED] = ""
    run_id: Annotated[str, REQUIRED] = ""
    year: Annotated[int, checked(integer, minimum=1), REQUIRED] = 0
    month: Annotated[int, checked(integer, minimum=1, maximum=12), REQUIRED] = 0
    ym: Annotated[str, checked(string, pattern="^[0-9]{4}-[0-9]{2}$"), REQUIRED] = ""
    step: str  # the first failing test's node id, or "collection"
    failure_class: str
    message: str
    error_signature: str  # the first failure's signature (not its fingerprint)
    failures: tuple[Failure, ...] = ()
    # Tests the captured run saw fail and then pass on a re-run (a re-run plugin): flaky,
    # recorded with the failures' triage, never in the selection.
    passed_on_rerun: tuple[Failure, ...] = ()
    fingerprints: tuple[str, ...] = ()
    nodeids: tuple[str, ...] = ()
    rootdir: Optional[str] = None
    tdd_nodeids: tuple[str, ...] = ()  # tests marked @pytest.mark.tdd
    pytest_options: tuple[str, ...] = ()  # the capture's options replayed by every verification run
    # Its selection filters (-k, -m, --deselect, --ignore): honoured by the localisation run.
    pytest_filters: tuple[str, ...] = ()
    invocation_dir: Optional[str] = None  # where pytest was started, relative to rootdir (POSIX; None: rootdir)
    diff_hash: Optional[str] = None  # working-tree hash at capture (null: unknown)
    failure_type: Optional[str] = None
    fingerprint: Optional[str] = None
    counts: Mapping[str, int] = field(default_factory=empty_map)  # {outcome: count} of the capture
    reopened_after_iteration: Optional[int] = None  # `selfheal reopen`: the next loop run starts after it
    # A run that saw the failures again with the code changed: the stop at this attempt is
    # history, but the loop run (its budget and counters) goes on (loop/sticky.py).
    resumed_after_iteration: Optional[int] = None
    # sha256 of the failing tests' files and their conftests at capture (analysis/testfiles.py).
    test_digests: Mapping[str, str] = field(default_factory=empty_map)
    # Failing tests the capture counted but could not keep (over its cap): never verified.
    unverified_failures: int = 0
    # The run token of the `selfheal ci` that started this capture: ci loops only its own.
    ci_run: Optional[str] = None
    # What decides what runs and how a result is judged, at capture (None: captured before seals).
    seal: Optional[Seal] = None
