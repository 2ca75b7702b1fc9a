"""The remediation plan: ``plan.json`` from an incident, and its revisions (pure).

One action per root cause (:mod:`pytest_selfheal.plan.groups`). A command selects every
failing node id, quoted with :func:`shlex.quote`: the loop splits it with :func:`shlex.split`
and runs it without a shell. The rules are in docs/loop.md "The plan".
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.errors import InputError
from pytest_selfheal.plan.groups import Group, evidence_paths, group_by_root_cause, selection_file
from pytest_selfheal.plan.suspects import RankedGroup, Source, locate, rank_groups
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.models import (
    BUILD_COMPILE,
    DOCTEST_MISMATCH,
    FAILURE_CLASS_ENVIRONMENT,
    LINT,
    TEST_ASSERTION,
    TIMEOUT,
    TOOLING_ENV,
    TYPECHECK,
    UNKNOWN,
)
from pytest_selfheal.records.plan import Hypothesis, Plan, PlanAction, ReplanEntry
from pytest_selfheal.records.redacted import runnable_nodeid
from pytest_selfheal.records.tolerant import unique
from pytest_selfheal.records.vocab import EvidenceKind

DONE_CRITERIA: tuple[str, ...] = (
    "Target error no longer reproduces",
    "Listed verification commands pass",
    "No new failure appears in the verification selection",
    "The regression check finds no test the change broke (verification.regression)",
)

# Per failure type: action title verb, hypothesis text, confidence.
_TYPE_INFO: dict[str, tuple[str, str, str]] = {
    TEST_ASSERTION: ("Fix the failing assertion",
                     "the code under test returns a wrong value or the test expectation is outdated", "medium"),
    DOCTEST_MISMATCH: ("Fix the doctest mismatch", "a docstring example prints something else than its expected "
                       "output: the code changed or the example is outdated", "medium"),
    TYPECHECK: ("Fix the type error", "a type error: a call or value does not match its declared type", "high"),
    LINT: ("Fix the lint error", "a lint rule is violated by the changed code", "high"),
    BUILD_COMPILE: ("Fix the syntax or import error",
                    "a syntax or import error (a module, name or dependency that does not load)", "high"),
    TOOLING_ENV: ("Repair the test environment", "an environment problem (missing module or command, credentials, "
                  "service, permissions or disk), not a code defect", "high"),
    TIMEOUT: ("Investigate the timeout", "the test hangs or is too slow: a deadlock, a wait on an unavailable "
              "resource or a performance regression", "low"),
    UNKNOWN: ("Investigate the failure", "the failure could not be classified; read the log tail", "low"),
}

STEP_COLLECTION = "collection"  # the step of an incident whose first failure is a collection error

# A command selecting more node ids than this is shown with its first few, then "… N more".
_SHOWN_NODEIDS = 10
_SHOWN_HEAD = 3
_GROUP_HASH_LEN = 12


def _type_info(failure_type: str) -> tuple[str, str, str]:
    return _TYPE_INFO.get(failure_type, _TYPE_INFO[UNKNOWN])


def _failures(incident: Incident) -> tuple[Failure, ...]:
    """The incident's failures; an incident without a list gets one from its top-level fields."""
    if incident.failures:
        return incident.failures
    step = incident.step
    return (
        Failure(
            nodeid=step if step and step != STEP_COLLECTION else None,
            test=step if step != STEP_COLLECTION else "",
            fingerprint=incident.fingerprint or _short_hash(incident.error_signature),
            signature=incident.error_signature,
            failure_type=incident.failure_type if incident.failure_type is not None else UNKNOWN,
            failure_class=incident.failure_class,
            message=incident.message,
            code_fixable=False,
            transient=incident.failure_class == "transient",
        ),
    )


# An xdist worker's own error (its collection differed) is reported under the worker's name.
_XDIST_WORKER = re.compile(r"gw\d+")


def _selection(failure: Failure) -> Optional[str]:
    """A failure's node id or junit identity; none for an xdist worker's own error (``gw1``)."""
    selection = failure.nodeid or failure.test or None
    return None if selection is not None and _XDIST_WORKER.fullmatch(selection) else selection


def normalised_message(failure: Failure) -> str:
    """The message part of a ``<type> | <test> | <message>`` signature, the known test cut out exactly."""
    signature, test = failure.signature, failure.test
    head = f"{failure.failure_type} | {test} | "
    if test and signature.startswith(head):
        return signature[len(head):]
    parts = signature.split(" | ", 2)
    if len(parts) == 3:
        return parts[2]
    return signature or failure.message


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_GROUP_HASH_LEN]


def group_failures(failures: Sequence[Failure]) -> list[Group]:
    return [r.group for r in rank_failures(failures)]


def rank_failures(failures: Sequence[Failure]) -> list[RankedGroup]:
    return rank_groups(group_by_root_cause(failures, lambda f: (f.failure_type or UNKNOWN, normalised_message(f))))


def pytest_command(nodeids: Sequence[str], *, python: str = "python") -> str:
    """``python -m pytest -q <nodeid>...`` shell-quoted (none: ``--collect-only``, a collection error)."""
    runnable: list[str] = []
    for nodeid in nodeids:
        parent = runnable_nodeid(nodeid)
        if parent is not None and (parent == nodeid or parent not in runnable):
            runnable.append(parent)
    argv = [python, "-m", "pytest", "-q", *(runnable if nodeids else ["--collect-only"])]
    return " ".join(shlex.quote(arg) for arg in argv)


def _priority(members: Sequence[Failure]) -> str:
    first = members[0]
    if first.failure_type == TOOLING_ENV or first.failure_class == FAILURE_CLASS_ENVIRONMENT:
        return "P2"  # environment: not fixable by code changes
    if first.transient is True:
        return "P1"  # transient / flaky-looking: a re-run may be enough
    if first.code_fixable is True:
        return "P0"  # deterministic and code-fixable: the main work
    return "P1"


def shorten(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The keys of a built action, hypothesis and plan, in the order plan.json has always had them.
_ACTION_KEYS = ("id", "title", "priority", "risk", "target_paths", "test_paths", "verification", "fingerprint",
                "fingerprints", "signature", "failure_type", "nodeids", "root_cause")
_HYPOTHESIS_KEYS = ("id", "confidence", "reason", "actions", "failure_type")
# What an action takes from its located top suspect (plan/suspects.py).
_LOCATED_FIELDS = ("where", "assertion", "suspects", "excerpt", "also_where", "also_excerpt")
_PLAN_KEYS = ("incident_id", "generated_at", "revision", "summary", "root_cause_hypotheses", "actions",
              "verification_commands", "done_criteria")


def _action(index: int, ranked: RankedGroup, python: str, source: Optional[Source]) -> PlanAction:
    group = ranked.group
    members = group.members
    first = members[0]
    failure_type = first.failure_type or UNKNOWN
    message = normalised_message(first)
    nodeids = unique([s for s in (_selection(m) for m in members) if s is not None])
    tests = unique([f for f in (selection_file(n) for n in nodeids) if f is not None])
    messages = len({normalised_message(m) for m in members})
    shapes = f", {messages} messages" if messages > 1 else ""
    if group.evidence == EvidenceKind.FINGERPRINT:
        # No evidence: the paths of the traceback text and the test file's imports.
        candidates = [p for member in members for p in member.target_paths if p]
        targets = unique([p for p in candidates if not is_test_file(p)])
        tests = unique(tests + [p for p in candidates if is_test_file(p) and p.endswith(".py")])
        signature = f"{failure_type} | {message}"
        about = shorten(message) or failure_type
    else:
        targets = evidence_paths(group)
        signature = f"{failure_type} | root cause {group.path}::{group.name}"
        about = shorten(f"{group.name} in {group.path}{shapes} ({message})")
    verb = _type_info(failure_type)[0]
    raised = _raised(first) if failure_type == TEST_ASSERTION else None
    if raised is not None:  # an exception, not a failed assertion: what it is, where it was raised
        verb, about = raised[0], shorten(raised[1] + shapes)
    count = f" ({len(nodeids)} tests)" if len(nodeids) > 1 else f" in {nodeids[0]}" if nodeids else ""
    located = locate(ranked, source)
    return PlanAction(
        id=f"A{index}",
        title=f"{verb}{count}: {about}",
        priority=_priority(members),
        risk="low" if len(targets) <= 2 else "medium",  # a fix confined to the test and one module
        target_paths=tuple(targets),
        test_paths=tuple(tests),
        verification=(pytest_command(nodeids, python=python),),
        fingerprint=_short_hash(signature),
        fingerprints=tuple(unique([m.fingerprint for m in members if m.fingerprint])),
        signature=signature,
        failure_type=failure_type,
        nodeids=tuple(nodeids),
        root_cause=group.key(),
        **{name: getattr(located, name) for name in _LOCATED_FIELDS},
        keys=_ACTION_KEYS + located.action_keys(),
    )


def _raised(failure: Failure) -> Optional[tuple[str, str]]:
    """The title's verb and place for a failure that raised an exception (not an assertion's)."""
    evidence = failure.root_cause
    if evidence is None or not evidence.exception:
        return None
    places = [p for p in (evidence.raised, evidence.frame) if p is not None]
    said = [f"{p.path}:{p.line} ({p.name})" if p.line is not None else f"{p.path} ({p.name})" for p in places]
    return f"Fix the {evidence.exception}", "raised in " + " from ".join(said) if said else "raised"


def _hypotheses(actions: Sequence[PlanAction], groups: Sequence[Group]) -> tuple[Hypothesis, ...]:
    by_type: dict[str, list[int]] = {}
    for i, action in enumerate(actions):
        by_type.setdefault(action.failure_type or "", []).append(i)
    hypotheses: list[Hypothesis] = []
    for n, (failure_type, indexes) in enumerate(by_type.items(), start=1):
        _, reason, confidence = _type_info(failure_type)
        if any(m.transient is True for i in indexes for m in groups[i].members):
            # Transient classes: a re-run may pass; the code may be fine.
            reason += "; the failure looks transient (a re-run may pass)"
            confidence = "low"
        example = actions[indexes[0]]
        ids = ", ".join(actions[i].id for i in indexes)
        where = example.nodeids[0] if example.nodeids else failure_type
        message = normalised_message(groups[indexes[0]].members[0])
        cause = example.root_cause
        if cause is not None and cause.path:
            reason += f"; the evidence points at {cause.path}::{cause.name}"
        hypotheses.append(Hypothesis(
            id=f"H{n}",
            confidence=confidence,
            reason=f"{ids}: {reason} ({where}: {shorten(message, 120)})",
            actions=tuple(actions[i].id for i in indexes),
            failure_type=failure_type,
            keys=_HYPOTHESIS_KEYS,
        ))
    return tuple(hypotheses)


def build_plan(incident: Incident, *, generated_at: str, python: str = "python", source: Optional[Source] = None) -> Plan:
    """The plan for ``incident``, revision 1; ``source`` reads project files for the code excerpts."""
    incident_id = incident.incident_id
    if not incident_id:
        raise InputError("incident.json: 'incident_id' must be a non-empty string")
    ranked = rank_failures(_failures(incident))
    groups = [r.group for r in ranked]
    actions = tuple(_action(i, r, python, source) for i, r in enumerate(ranked, start=1))
    all_nodeids = unique([n for a in actions for n in a.nodeids])
    first = actions[0]
    tests = len(all_nodeids)
    errors = sum(len(r.group.members) for r in ranked)
    failing = (f"{tests} failing test{'s' if tests != 1 else ''}" if tests
               else f"{errors} error{'s' if errors != 1 else ''} outside any test")
    summary = (
        f"{failing} in {len(actions)} root cause "
        f"group{'s' if len(actions) != 1 else ''}; first: "
        f"{first.nodeids[0] if first.nodeids else incident.step or 'unknown'} — "
        f"{first.failure_type}: {shorten(normalised_message(groups[0].members[0]), 120)}"
    )
    return Plan(
        incident_id=incident_id,
        generated_at=generated_at,
        revision=1,
        summary=summary,
        root_cause_hypotheses=_hypotheses(actions, groups),
        actions=actions,
        verification_commands=(pytest_command(all_nodeids, python=python),),
        done_criteria=DONE_CRITERIA,
        keys=_PLAN_KEYS,
    )


def readable_command(command: str) -> str:
    """``command`` as people read it: the first few node ids of many, then ``… N more node ids``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    # A node id given to an option (--deselect a.py::t) is the option's, not the selection's.
    selected = [i for i, w in enumerate(words) if "::" in w and not w.startswith("-")
                and (i == 0 or words[i - 1] != "--deselect")]
    if len(selected) <= _SHOWN_NODEIDS:
        return command
    hidden = set(selected[_SHOWN_HEAD:])
    shown: list[str] = []
    for index, word in enumerate(words):
        if index == selected[_SHOWN_HEAD]:
            shown.append(f"… {len(hidden)} more node ids")
        if index not in hidden:
            shown.append(shlex.quote(word))
    return " ".join(shown)


def verification_argv(plan: Plan) -> list[list[str]]:
    """The verification commands as argv lists; InputError for an empty or unbalanced one."""
    argvs: list[list[str]] = []
    for i, command in enumerate(plan.verification_commands):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise InputError(f"plan.json: verification_commands[{i}] cannot be parsed ({exc})") from None
        if not argv:
            raise InputError(f"plan.json: verification_commands[{i}] is empty")
        argvs.append(argv)
    return argvs


def plan_revision(plan: Plan) -> int:
    """The plan's revision, 1 for a plan that has none (an older one)."""
    return plan.revision if plan.revision is not None and plan.revision >= 1 else 1


_LOWER = {"high": "medium", "medium": "low", "low": "low"}


def _attempt_fingerprints(attempt: Attempt) -> list[str]:
    # An attempt whose document has no ``failures`` list (an older one) names its signature.
    if attempt.failures or (attempt.keys is not None and "failures" in attempt.keys):
        return [f.fingerprint for f in attempt.failures if f.fingerprint]
    return [attempt.error_signature] if attempt.error_signature else []


def replan(plan: Plan, attempts: Sequence[Attempt], *, generated_at: Optional[str] = None) -> Plan:
    """A new revision of ``plan`` after ``replan_requested``: what was tried is written in, confidence lowered."""
    revision = plan_revision(plan)
    fingerprints = tuple(unique([fp for a in attempts for fp in _attempt_fingerprints(a)]))
    iterations = len(attempts)
    applied = unique([x for a in attempts for x in a.actions_applied])
    note = (
        f"Revision {revision + 1}: {iterations} iteration{'s' if iterations != 1 else ''} "
        f"of revision {revision} made no "
        f"progress (fingerprints seen: {', '.join(fingerprints) or 'none'}"
        + (f"; actions tried: {', '.join(applied)}" if applied else "")
        + ")."
    )
    # The summary carries only the latest note; replan_history keeps them all.
    base_summary = plan.base_summary or plan.summary
    joiner = " " if not base_summary or base_summary.endswith((".", "!", "?")) else ". "
    hypotheses = [replace(h, confidence=_LOWER.get(h.confidence, "low")) for h in plan.root_cause_hypotheses]
    targets = unique([p for a in plan.actions for p in a.target_paths])
    hypotheses.append(Hypothesis(
        id=f"H{len(hypotheses) + 1}",
        confidence="medium",
        reason=(
            f"The previous plan did not make progress after {iterations} iteration"
            f"{'s' if iterations != 1 else ''}: the root cause may lie outside its target paths "
            f"({', '.join(targets) or 'none'}), e.g. in shared fixtures, configuration or a dependency"
        ),
        actions=(),
        failure_type="",
        keys=_HYPOTHESIS_KEYS,
    ))
    entry = ReplanEntry(revision, iterations, fingerprints, keys=("revision", "iterations", "fingerprints_seen"))
    return replace(
        plan,
        base_summary=base_summary,
        summary=f"{base_summary}{joiner}{note}".strip(),
        root_cause_hypotheses=tuple(hypotheses),
        revision=revision + 1,
        replan_history=plan.replan_history + (entry,),
        generated_at=plan.generated_at if generated_at is None else generated_at,
    )
