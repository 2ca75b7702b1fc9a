"""``plan.json`` as a record: ``Plan`` with its ``Hypothesis`` and ``PlanAction`` lists
(docs/store.md): the contract fields first, then the extensions ``plan/build.py`` writes. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

from pytest_selfheal.records.jsondoc import (
    JsonRecord,
    array_of,
    checked,
    incident_id,
    number,
    string,
    timestamp,
)
from pytest_selfheal.records.vocab import SUSPECT_EVIDENCE, EvidenceKind


@dataclass(frozen=True)
class Hypothesis(JsonRecord):
    """One root-cause hypothesis: ``{id, confidence, reason}`` + the actions it explains."""

    id: str
    confidence: str  # high | medium | low
    reason: str
    actions: tuple[str, ...] = ()  # the plan action ids it explains
    failure_type: Optional[str] = None


@dataclass(frozen=True)
class GroupKey(JsonRecord):
    """An action's ``root_cause``: which evidence grouped its failures and where it points (plan/groups.py)."""

    evidence: Annotated[str, checked(string, enum=EvidenceKind)]  # an EvidenceKind
    path: Optional[str] = None  # the defining file (absent for a fingerprint group)
    name: Optional[str] = None  # the function or class


@dataclass(frozen=True, kw_only=True)
class SuspectEntry(JsonRecord):
    """One suspicious function of an action (plan/suspects.py): where, how suspicious, why."""

    path: str
    name: str
    line: Optional[int] = None
    score: Annotated[float, checked(number, minimum=0, maximum=1)]
    evidence: Annotated[str, checked(string, enum=SUSPECT_EVIDENCE)]  # an EvidenceKind other than fingerprint
    failures: int = 0  # the action's failures whose evidence names it

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else self.path


@dataclass(frozen=True)
class Excerpt(JsonRecord):
    """A few lines of code around the top suspect's line, read when the plan was built."""

    path: str
    start: int  # the 1-based line number of lines[0]
    line: int  # the suspect's line, inside lines
    lines: tuple[str, ...]

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
    where: Annotated[Optional[str], checked(string, description="The top suspect's path:line.")] = None
    assertion: Annotated[Optional[str], checked(
        string, description="The first failure's last test-file line (path:line): its assertion."
    )] = None
    suspects: Annotated[tuple[SuspectEntry, ...], checked(
        array_of(SuspectEntry.parse), description="The group's suspicious functions, most suspicious first."
    )] = ()
    excerpt: Annotated[Optional[Excerpt], checked(
        Excerpt.parse, description="A few lines of code around the top suspect's line."
    )] = None
    also_where: Annotated[Optional[str], checked(string, description=(
        "The second suspect's path:line when its score is within the near-tie margin of the top's: the two are equals."
    ))] = None
    also_excerpt: Annotated[Optional[Excerpt], checked(
        Excerpt.parse, description="A few lines of code around also_where's line."
    )] = None

    @property
    def key(self) -> GroupKey:
        """The evidence that grouped its failures (an older plan's: by fingerprint)."""
        return self.root_cause or GroupKey(EvidenceKind.FINGERPRINT)

    def suspect_lines(self) -> tuple[str, ...]:
        """Its suspects as ``name (path:line, evidence, score)``."""
        return tuple(f"{s.name} ({s.where}, {s.evidence}, {s.score:.2f})" for s in self.suspects)

    @property
    def others(self) -> tuple[str, ...]:
        """The suspect lines after the top one and its equal."""
        return self.suspect_lines()[2 if self.also_where else 1:]

    def where_line(self) -> Optional[str]:
        """``where: path:line`` (both, when two suspects are equals) and the assertion's line."""
        if not self.where:
            return None
        both = f"{self.where} or {self.also_where}, equal suspects: check both" if self.also_where else self.where
        return f"where: {both}" + (f" (assertion {self.assertion})" if self.assertion else "")


@dataclass(frozen=True)
class ReplanEntry(JsonRecord):
    """One earlier revision in ``replan_history``: what it tried before the replan."""

    revision: int = 0
    iterations: int = 0
    fingerprints_seen: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan(JsonRecord):
    """``error_plans/<id>/plan.json``."""

    incident_id: Annotated[str, incident_id]
    generated_at: Annotated[str, timestamp]
    summary: str
    root_cause_hypotheses: tuple[Hypothesis, ...]
    actions: tuple[PlanAction, ...]
    verification_commands: tuple[str, ...]  # shell-like lines, split with shlex, never run by a shell
    done_criteria: tuple[str, ...]
    revision: Optional[int] = None  # absent in plans of the first contract: revision 1
    base_summary: Optional[str] = None  # the summary before replan notes were added
    replan_history: tuple[ReplanEntry, ...] = ()
    replanned_at_iteration: Optional[int] = None
