"""``incident.json`` as a record: ``Incident`` with its ``FailureEntry`` list (docs/store.md). Pure.

``FailureEntry`` is also the shape of an attempt's ``failures`` and ``new_failures``
(there without ``outcome``, ``scheme``, ``code_fixable``, ``transient``,
``failure_class``, ``message``, ``target_paths`` and ``root_cause``: absent keys stay absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.jsondoc import (
    Extra,
    Field,
    JsonRecord,
    array_of,
    boolean,
    checked,
    empty_map,
    incident_id,
    integer,
    nullable,
    number,
    object_of,
    string,
    strings,
    timestamp,
)
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.records.vocab import FAILURE_TYPES, OUTCOMES, IncidentStatus


@dataclass(frozen=True)
class CodeRef(JsonRecord):
    """A place in the code under test: a project file and a function or class in it (+ a line for a frame)."""

    KIND: ClassVar[str] = "code reference"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("path", string, required=True),
        Field("name", string),
        Field("line", nullable(integer)),
        Field("bases", strings),
        Field("score", checked(number, minimum=0, maximum=1)),
    )

    path: str  # repo-relative POSIX path, never a test file
    name: str = ""  # qualified name (``Stack.push``)
    line: Optional[int] = None  # 1-based: a frame's line, a called function's ``def``
    bases: tuple[str, ...] = ()  # a called class: its project base classes as ``path::name``
    score: Optional[float] = None  # a spectrum entry: its Ochiai score
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class RootCause(JsonRecord):
    """A failure's root-cause evidence, resolved at capture inside pytest (docs/store.md)."""

    KIND: ClassVar[str] = "root cause"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("frame", CodeRef.parse),
        Field("stack", array_of(CodeRef.parse)),
        Field("test_line", CodeRef.parse),
        Field("calls", array_of(CodeRef.parse)),
        Field(
            "spectrum",
            checked(
                array_of(CodeRef.parse),
                description=(
                    "With --selfheal-spectrum or after the loop's localisation run: the test's most suspicious"
                    " functions (Ochiai over the run's failing and passing tests) and those its evidence names, most"
                    " suspicious first."
                ),
            ),
        ),
        Field("exception", checked(string, description="The exception's type when it is not an assertion's.")),
        Field(
            "raised",
            checked(
                CodeRef.parse,
                description=(
                    "Where that exception was raised when it was outside the project: a library's or the standard"
                    " library's file (relative to its import root), function and line."
                ),
            ),
        ),
    )

    frame: Optional[CodeRef] = None  # the innermost traceback frame in the project outside the tests
    stack: tuple[CodeRef, ...] = ()  # the project frames on the way to it, outermost first
    test_line: Optional[CodeRef] = None  # the last test-file line of the traceback (the assertion)
    calls: tuple[CodeRef, ...] = ()  # the project functions and classes the test calls, where they are defined
    spectrum: tuple[CodeRef, ...] = ()  # --selfheal-spectrum: the functions it ran, most suspicious first
    exception: Optional[str] = None  # the exception's type (``json.JSONDecodeError``) unless an assertion's
    raised: Optional[CodeRef] = None  # where it was raised outside the project (``json/decoder.py``)
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class Triage(JsonRecord):
    """A captured failure's triage against the base branch's history: new, known, flaky or
    quarantined, and the evidence behind it (docs/history.md). Absent fields are left out."""

    KIND: ClassVar[str] = "triage"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("label", string, required=True),
        Field("detail", string, required=True),
        Field("first_seen_commit", string),
        Field("first_seen_at", string),
        Field("occurrences", integer),
        Field("flake_rate", number),
        Field("quarantine_reason", string),
        Field("base_branch", string),
    )

    label: str  # a TriageLabel (a plain string here: a label of a newer version still reads)
    detail: str  # one line a person reads: "first seen on main at abc1234 (2026-11-20), 3 times"
    first_seen_commit: Optional[str] = None
    first_seen_at: Optional[str] = None
    occurrences: Optional[int] = None
    flake_rate: Optional[float] = None
    quarantine_reason: Optional[str] = None
    base_branch: Optional[str] = None  # the branch "known" refers to
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class FailureEntry(JsonRecord):
    """One failing test as recorded in an incident or an attempt (every key optional)."""

    KIND: ClassVar[str] = "failure"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("nodeid", nullable(string)),
        Field("test", string),
        Field("outcome", checked(string, enum=OUTCOMES)),
        Field("fingerprint", string),
        Field("signature", string),
        Field("scheme", checked(integer, minimum=0)),
        Field("failure_type", checked(string, enum=FAILURE_TYPES)),
        Field("code_fixable", boolean),
        Field("transient", boolean),
        Field("failure_class", string),
        Field("message", string),
        Field("target_paths", strings),
        Field(
            "root_cause",
            checked(
                RootCause.parse,
                description=(
                    "Root-cause evidence resolved at capture: the innermost project frame outside the tests, the"
                    " project frames on the way to it, the test's failing line, and the project definitions the test"
                    " calls; with --selfheal-spectrum, the functions it ran ranked by suspiciousness."
                ),
            ),
        ),
        Field("triage", Triage.parse),
    )

    nodeid: Optional[str] = None  # the pytest node id, when the plugin captured it
    test: str = ""  # runner-independent identity, classname::name
    outcome: str = ""
    fingerprint: str = ""
    signature: str = ""
    scheme: int = 0
    failure_type: str = ""
    code_fixable: Optional[bool] = None
    transient: Optional[bool] = None
    failure_class: str = ""
    message: str = ""
    target_paths: tuple[str, ...] = ()
    root_cause: Optional[RootCause] = None  # capture only: the evidence that groups failures by root cause
    triage: Optional[Triage] = None  # capture only: new, known, flaky or quarantined
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


failure_entries = array_of(FailureEntry.parse)


@dataclass(frozen=True)
class Incident(JsonRecord):
    """``error_inbox/<id>/incident.json``: the contract fields, then the known extensions."""

    KIND: ClassVar[str] = "incident"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("incident_id", incident_id, required=True),
        Field("status", checked(string, enum=IncidentStatus), required=True),
        Field("created_at", timestamp, required=True),
        Field("updated_at", timestamp, required=True),
        Field("run_id", string, required=True),
        Field("year", checked(integer, minimum=1), required=True),
        Field("month", checked(integer, minimum=1, maximum=12), required=True),
        Field("ym", checked(string, pattern="^[0-9]{4}-[0-9]{2}$"), required=True),
        Field("step", string, required=True),
        Field("failure_class", string, required=True),
        Field("message", string, required=True),
        Field("error_signature", string, required=True),
        Field("failures", failure_entries),
        Field("passed_on_rerun", failure_entries),
        Field("fingerprints", strings),
        Field("nodeids", strings),
        Field("rootdir", string),
        Field("tdd_nodeids", strings),
        Field("pytest_options", strings),
        Field("invocation_dir", string),
        Field("diff_hash", nullable(string)),
        Field("failure_type", string),
        Field("fingerprint", string),
        Field("counts", object_of(integer)),
        Field("reopened_after_iteration", integer),
        Field("resumed_after_iteration", integer),
        Field("test_digests", object_of(string)),
        Field("unverified_failures", integer),
        Field("ci_run", string),
        Field("seal", Seal.parse),
    )

    # The capture fills the failure fields; the store fills the empty identity and time
    # fields when it creates the incident (Store.create_incident).
    step: str  # the first failing test's node id, or "collection"
    failure_class: str
    message: str
    error_signature: str  # the first failure's signature (not its fingerprint)
    incident_id: str = ""
    status: str = "new"  # a copy of status.txt, which is authoritative
    created_at: str = ""
    updated_at: str = ""
    run_id: str = ""
    year: int = 0
    month: int = 0
    ym: str = ""
    failures: tuple[FailureEntry, ...] = ()
    # Tests the captured run saw fail and then pass on a re-run (a re-run plugin): flaky,
    # recorded with the failures' triage, never in the selection.
    passed_on_rerun: tuple[FailureEntry, ...] = ()
    fingerprints: tuple[str, ...] = ()
    nodeids: tuple[str, ...] = ()
    rootdir: Optional[str] = None
    tdd_nodeids: tuple[str, ...] = ()  # tests marked @pytest.mark.tdd
    pytest_options: tuple[str, ...] = ()  # the capture's options replayed by every verification run
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
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()
