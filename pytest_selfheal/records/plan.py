"""``plan.json`` as a record: ``Plan`` with its ``Hypothesis`` and ``PlanAction`` lists (docs/store.md). Pure.

Contract fields first; the extensions are those ``plan/build.py`` writes: ``revision``,
per action ``fingerprint``, ``fingerprints``, ``signature``, ``failure_type``, ``nodeids``,
``test_paths``, ``root_cause``, ``where``, ``assertion``, ``suspects``, ``excerpt``,
per hypothesis ``actions`` and ``failure_type``, and after a replan ``base_summary``,
``replan_history`` and ``replanned_at_iteration``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.jsondoc import (
    Extra,
    Field,
    JsonRecord,
    array_of,
    checked,
    incident_id,
    integer,
    number,
    string,
    strings,
    timestamp,
)
from pytest_selfheal.records.vocab import SUSPECT_EVIDENCE, EvidenceKind


@dataclass(frozen=True)
class Hypothesis(JsonRecord):
    """One root-cause hypothesis: ``{id, confidence, reason}`` + the actions it explains."""

    KIND: ClassVar[str] = "hypothesis"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("id", string, required=True),
        Field("confidence", string, required=True),
        Field("reason", string, required=True),
        Field("actions", strings),
        Field("failure_type", string),
    )

    id: str
    confidence: str  # high | medium | low
    reason: str
    actions: tuple[str, ...] = ()  # the plan action ids it explains
    failure_type: Optional[str] = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class GroupKey(JsonRecord):
    """An action's ``root_cause``: which evidence grouped its failures and where it points (plan/groups.py)."""

    KIND: ClassVar[str] = "root cause"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field(
            "evidence",
            checked(string, enum=EvidenceKind),
            required=True,
        ),
        Field("path", string),
        Field("name", string),
    )

    evidence: str  # an EvidenceKind
    path: Optional[str] = None  # the defining file (absent for a fingerprint group)
    name: Optional[str] = None  # the function or class
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class SuspectEntry(JsonRecord):
    """One suspicious function of an action (plan/suspects.py): where, how suspicious, why."""

    KIND: ClassVar[str] = "suspect"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("path", string, required=True),
        Field("name", string, required=True),
        Field("line", integer),
        Field("score", checked(number, minimum=0, maximum=1), required=True),
        Field("evidence", checked(string, enum=SUSPECT_EVIDENCE), required=True),
        Field("failures", integer),
    )

    path: str
    name: str
    score: float
    evidence: str  # an EvidenceKind other than fingerprint
    line: Optional[int] = None
    failures: int = 0  # the action's failures whose evidence names it
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()

    @property
    def where(self) -> str:
        """``path:line`` (the path alone without a line)."""
        return f"{self.path}:{self.line}" if self.line is not None else self.path


@dataclass(frozen=True)
class Excerpt(JsonRecord):
    """A few lines of code around the top suspect's line, read when the plan was built."""

    KIND: ClassVar[str] = "excerpt"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("path", string, required=True),
        Field("start", integer, required=True),
        Field("line", integer, required=True),
        Field("lines", strings, required=True),
    )

    path: str
    start: int  # the 1-based line number of lines[0]
    line: int  # the suspect's line, inside lines
    lines: tuple[str, ...]
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()

    def numbered(self) -> tuple[str, ...]:
        """The lines as ``  12 | code``, the suspect's line marked ``>``."""
        width = len(str(self.start + len(self.lines) - 1))
        return tuple(
            f"{'>' if n == self.line else ' '} {n:>{width}} | {text}"
            for n, text in enumerate(self.lines, start=self.start)
        )


@dataclass(frozen=True)
class PlanAction(JsonRecord):
    """One plan action: ``{id, title, priority, risk, target_paths, verification}`` + its failure group."""

    KIND: ClassVar[str] = "plan action"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("id", string, required=True),
        Field("title", string, required=True),
        Field("priority", string, required=True),
        Field("risk", string, required=True),
        Field("target_paths", strings, required=True),
        Field("verification", strings, required=True),
        Field("fingerprint", string),
        Field("fingerprints", strings),
        Field("signature", string),
        Field("failure_type", string),
        Field("nodeids", strings),
        Field("test_paths", strings),
        Field("root_cause", GroupKey.parse),
        Field("where", checked(string, description="The top suspect's path:line.")),
        Field(
            "assertion",
            checked(string, description="The first failure's last test-file line (path:line): its assertion."),
        ),
        Field(
            "suspects",
            checked(
                array_of(SuspectEntry.parse), description="The group's suspicious functions, most suspicious first."
            ),
        ),
        Field("excerpt", checked(Excerpt.parse, description="A few lines of code around the top suspect's line.")),
        Field("also_where", checked(string, description=(
            "The second suspect's path:line when its score is within the near-tie margin of the top's: "
            "the two are equals."))),
        Field("also_excerpt", checked(Excerpt.parse, description="A few lines of code around also_where's line.")),
    )

    id: str
    title: str
    priority: str
    risk: str
    target_paths: tuple[str, ...]
    verification: tuple[str, ...]
    fingerprint: Optional[str] = None  # of the group: hash of "<failure_type> | <message>"
    fingerprints: tuple[str, ...] = ()  # the member failures' fingerprints
    signature: Optional[str] = None
    failure_type: Optional[str] = None
    nodeids: tuple[str, ...] = ()
    test_paths: tuple[str, ...] = ()  # the failing tests' files: the tests to make pass, not to edit
    root_cause: Optional[GroupKey] = None  # the evidence that grouped the action's failures
    where: Optional[str] = None  # the top suspect's path:line
    assertion: Optional[str] = None  # the first failure's test line (path:line)
    suspects: tuple[SuspectEntry, ...] = ()  # most suspicious first
    excerpt: Optional[Excerpt] = None  # code around the top suspect's line
    also_where: Optional[str] = None  # the second suspect's path:line, when it ties with the top
    also_excerpt: Optional[Excerpt] = None  # code around also_where's line
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class ReplanEntry(JsonRecord):
    """One earlier revision in ``replan_history``: what it tried before the replan."""

    KIND: ClassVar[str] = "replan entry"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("revision", integer),
        Field("iterations", integer),
        Field("fingerprints_seen", strings),
    )

    revision: int = 0
    iterations: int = 0
    fingerprints_seen: tuple[str, ...] = ()
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True)
class Plan(JsonRecord):
    """``error_plans/<id>/plan.json``."""

    KIND: ClassVar[str] = "plan"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("incident_id", incident_id, required=True),
        Field("generated_at", timestamp, required=True),
        Field("summary", string, required=True),
        Field("root_cause_hypotheses", array_of(Hypothesis.parse), required=True),
        Field("actions", array_of(PlanAction.parse), required=True),
        Field("verification_commands", strings, required=True),
        Field("done_criteria", strings, required=True),
        Field("revision", integer),
        Field("base_summary", string),
        Field("replan_history", array_of(ReplanEntry.parse)),
        Field("replanned_at_iteration", integer),
    )

    incident_id: str
    generated_at: str
    summary: str
    root_cause_hypotheses: tuple[Hypothesis, ...]
    actions: tuple[PlanAction, ...]
    verification_commands: tuple[str, ...]  # shell-like lines, split with shlex, never run by a shell
    done_criteria: tuple[str, ...]
    revision: Optional[int] = None  # absent in plans of the first contract: revision 1
    base_summary: Optional[str] = None  # the summary before replan notes were added
    replan_history: tuple[ReplanEntry, ...] = ()
    replanned_at_iteration: Optional[int] = None
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()
