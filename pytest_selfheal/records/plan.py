"""``plan.json`` as a record: ``Plan`` with its ``Hypothesis`` and ``PlanAction`` lists (docs/store.md). Pure.

Contract fields first; the extensions are those ``plan/build.py`` writes: ``revision``,
per action ``fingerprint``, ``fingerprints``, ``signature``, ``failure_type``, ``nodeids``,
``test_paths``, ``root_cause``,
per hypothesis ``actions`` and ``failure_type``, and after a replan ``base_summary``,
``replan_history`` and ``replanned_at_iteration``.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar, Optional, Tuple

from pytest_selfheal.records.frozen import dataclass
from pytest_selfheal.records.jsondoc import Extra, Field, JsonRecord, array_of, integer, string, strings


@dataclass(frozen=True, eq=False, repr=False)
class Hypothesis(JsonRecord):
    """One root-cause hypothesis: ``{id, confidence, reason}`` + the actions it explains."""

    KIND: ClassVar[str] = "hypothesis"
    FIELDS: ClassVar[Tuple[Field, ...]] = (
        Field("id", string, required=True),
        Field("confidence", string, required=True),
        Field("reason", string, required=True),
        Field("actions", strings),
        Field("failure_type", string),
    )

    id: str
    confidence: str  # high | medium | low
    reason: str
    actions: Tuple[str, ...] = ()  # the plan action ids it explains
    failure_type: Optional[str] = None
    keys: Optional[Tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class GroupKey(JsonRecord):
    """An action's ``root_cause``: which evidence grouped its failures and where it points (plan/groups.py)."""

    KIND: ClassVar[str] = "root cause"
    FIELDS: ClassVar[Tuple[Field, ...]] = (
        Field("evidence", string, required=True),
        Field("path", string),
        Field("name", string),
    )

    evidence: str  # frame | calls | fingerprint
    path: Optional[str] = None  # the defining file (absent for a fingerprint group)
    name: Optional[str] = None  # the function or class
    keys: Optional[Tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class PlanAction(JsonRecord):
    """One plan action: ``{id, title, priority, risk, target_paths, verification}`` + its failure group."""

    KIND: ClassVar[str] = "plan action"
    FIELDS: ClassVar[Tuple[Field, ...]] = (
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
    )

    id: str
    title: str
    priority: str
    risk: str
    target_paths: Tuple[str, ...]
    verification: Tuple[str, ...]
    fingerprint: Optional[str] = None  # of the group: hash of "<failure_type> | <message>"
    fingerprints: Tuple[str, ...] = ()  # the member failures' fingerprints
    signature: Optional[str] = None
    failure_type: Optional[str] = None
    nodeids: Tuple[str, ...] = ()
    test_paths: Tuple[str, ...] = ()  # the failing tests' files: the tests to make pass, not to edit
    root_cause: Optional[GroupKey] = None  # the evidence that grouped the action's failures
    keys: Optional[Tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class ReplanEntry(JsonRecord):
    """One earlier revision in ``replan_history``: what it tried before the replan."""

    KIND: ClassVar[str] = "replan entry"
    FIELDS: ClassVar[Tuple[Field, ...]] = (
        Field("revision", integer),
        Field("iterations", integer),
        Field("fingerprints_seen", strings),
    )

    revision: int = 0
    iterations: int = 0
    fingerprints_seen: Tuple[str, ...] = ()
    keys: Optional[Tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


@dataclass(frozen=True, eq=False, repr=False)
class Plan(JsonRecord):
    """``error_plans/<id>/plan.json``."""

    KIND: ClassVar[str] = "plan"
    FIELDS: ClassVar[Tuple[Field, ...]] = (
        Field("incident_id", string, required=True),
        Field("generated_at", string, required=True),
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
    root_cause_hypotheses: Tuple[Hypothesis, ...]
    actions: Tuple[PlanAction, ...]
    verification_commands: Tuple[str, ...]  # shell-like lines, split with shlex, never run by a shell
    done_criteria: Tuple[str, ...]
    revision: Optional[int] = None  # absent in seed-contract plans: revision 1
    base_summary: Optional[str] = None  # the summary before replan notes were added
    replan_history: Tuple[ReplanEntry, ...] = ()
    replanned_at_iteration: Optional[int] = None
    keys: Optional[Tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()
