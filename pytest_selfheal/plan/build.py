"""The remediation plan: ``plan.json`` and ``plan.md`` from an incident (pure).

Contract fields (seed: error automation contract): incident_id, generated_at, summary,
root_cause_hypotheses, actions (id, title, priority, risk, target_paths, verification),
verification_commands, done_criteria. Extensions: ``revision`` (1, bumped by
:func:`replan`), per action ``fingerprint``/``fingerprints``/``signature``/
``failure_type``/``nodeids``, per hypothesis ``actions``.

One action per *fingerprint group*: failures with the same failure type and the same
normalised message. (Each failure's own fingerprint includes its test identity, so
grouping by fingerprint alone would give one action per test.) The rules are in
docs/loop.md "The plan".

Verification commands are strings for humans and for the loop driver, which splits them
with :func:`shlex.split` and runs the argv list without a shell
(:func:`verification_argv`); node ids are quoted with :func:`shlex.quote` so
parametrised ids with spaces or brackets survive the round trip.
"""

from __future__ import annotations

import copy
import hashlib
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal.analysis.frames import repo_relative
from pytest_selfheal.errors import InputError
from pytest_selfheal.records.redacted import runnable_nodeid
from pytest_selfheal.records.models import (
    BUILD_COMPILE,
    FAILURE_CLASS_ENVIRONMENT,
    LINT,
    TEST_ASSERTION,
    TIMEOUT,
    TOOLING_ENV,
    TYPECHECK,
    UNKNOWN,
)

DONE_CRITERIA: Tuple[str, ...] = (
    "Target error no longer reproduces",
    "Listed verification commands pass",
    "No new failure appears in the verification selection",
)

# Per failure type: action title verb, hypothesis text, confidence.
_TYPE_INFO: Dict[str, Tuple[str, str, str]] = {
    TEST_ASSERTION: (
        "Fix the failing assertion",
        "the code under test returns a wrong value or the test expectation is outdated",
        "medium",
    ),
    TYPECHECK: ("Fix the type error", "a type error: a call or value does not match its declared type", "high"),
    LINT: ("Fix the lint error", "a lint rule is violated by the changed code", "high"),
    BUILD_COMPILE: (
        "Fix the syntax or import error",
        "a syntax or import error (a module, name or dependency that does not load)",
        "high",
    ),
    TOOLING_ENV: (
        "Repair the test environment",
        "an environment problem (missing module or command, credentials, service, permissions or disk), "
        "not a code defect",
        "high",
    ),
    TIMEOUT: (
        "Investigate the timeout",
        "the test hangs or is too slow: a deadlock, a wait on an unavailable resource or a performance regression",
        "low",
    ),
    UNKNOWN: ("Investigate the failure", "the failure could not be classified; read the log tail", "low"),
}

_STEP_COLLECTION = "collection"
_GROUP_HASH_LEN = 12


def _type_info(failure_type: str) -> Tuple[str, str, str]:
    return _TYPE_INFO.get(failure_type, _TYPE_INFO[UNKNOWN])


def _str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _failures(incident: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The incident's failures; an incident without a list gets one from its top-level fields."""
    raw = incident.get("failures")
    failures: List[Dict[str, Any]] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping):
                failures.append(dict(item))
    if failures:
        return failures
    step = _str(incident.get("step"))
    return [
        {
            "nodeid": step if step and step != _STEP_COLLECTION else None,
            "test": step if step != _STEP_COLLECTION else "",
            "fingerprint": _str(incident.get("fingerprint")) or _short_hash(_str(incident.get("error_signature"))),
            "signature": _str(incident.get("error_signature")),
            "failure_type": _str(incident.get("failure_type"), UNKNOWN),
            "failure_class": _str(incident.get("failure_class")),
            "message": _str(incident.get("message")),
            "code_fixable": False,
            "transient": incident.get("failure_class") == "transient",
            "target_paths": [],
        }
    ]


def _selection(failure: Mapping[str, Any]) -> Optional[str]:
    """The pytest selection of a failure: its node id, else its junit test identity."""
    nodeid = failure.get("nodeid")
    if isinstance(nodeid, str) and nodeid:
        return nodeid
    test = failure.get("test")
    return test if isinstance(test, str) and test else None


def normalised_message(failure: Mapping[str, Any]) -> str:
    """The failure's signature without the test part: ``<normalised message>``.

    Signatures read ``<type> | <test> | <normalised message>`` (SPEC §5). The known test
    identity is cut out exactly, so a ``|`` inside the message or the test id is safe.
    """
    signature = _str(failure.get("signature"))
    failure_type = _str(failure.get("failure_type"))
    test = _str(failure.get("test"))
    head = f"{failure_type} | {test} | "
    if test and signature.startswith(head):
        return signature[len(head):]
    parts = signature.split(" | ", 2)
    if len(parts) == 3:
        return parts[2]
    return signature or _str(failure.get("message"))


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_GROUP_HASH_LEN]


def group_failures(failures: Sequence[Mapping[str, Any]]) -> List[List[Mapping[str, Any]]]:
    """Fingerprint groups: failures with the same type and normalised message, in order."""
    groups: Dict[Tuple[str, str], List[Mapping[str, Any]]] = {}
    for failure in failures:
        key = (_str(failure.get("failure_type"), UNKNOWN), normalised_message(failure))
        groups.setdefault(key, []).append(failure)
    return list(groups.values())


def pytest_command(nodeids: Sequence[str], *, python: str = "python") -> str:
    """``python -m pytest -q <nodeid>...`` with every argument shell-quoted.

    A redacted node id cannot be selected: its nearest selectable parent runs instead
    (``redact.runnable_nodeid``; one with nothing selectable left is dropped).
    """
    runnable: List[str] = []
    for nodeid in nodeids:
        parent = runnable_nodeid(nodeid)
        if parent is not None and (parent == nodeid or parent not in runnable):
            runnable.append(parent)
    argv = [python, "-m", "pytest", "-q", *runnable]
    return " ".join(shlex.quote(arg) for arg in argv)


def _test_file(selection: str) -> Optional[str]:
    """The repo-relative file part of a pytest node id, or None (junit identities have none)."""
    path = selection.split("::", 1)[0].replace("\\", "/")
    # "tests/test_x.py::t" has a file; "tests.test_x::t" (a junit classname) does not.
    if not (path.endswith(".py") or ("/" in path and "." in path.rsplit("/", 1)[1])):
        return None
    return repo_relative(path, ".")


def _unique(items: Sequence[str]) -> List[str]:
    out: List[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _priority(members: Sequence[Mapping[str, Any]]) -> str:
    first = members[0]
    if first.get("failure_type") == TOOLING_ENV or first.get("failure_class") == FAILURE_CLASS_ENVIRONMENT:
        return "P2"  # environment: not fixable by code changes
    if first.get("transient") is True:
        return "P1"  # transient / flaky-looking: a re-run may be enough
    if first.get("code_fixable") is True:
        return "P0"  # deterministic and code-fixable: the main work
    return "P1"


def _risk(target_paths: Sequence[str]) -> str:
    # A fix confined to the test and one module is low risk; wider reach is medium.
    return "low" if len(target_paths) <= 2 else "medium"


def _shorten(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _collect_only(python: str) -> str:
    # A collection error without a node id: re-running collection is the verification.
    return " ".join(shlex.quote(arg) for arg in (python, "-m", "pytest", "-q", "--collect-only"))


def _action(index: int, members: Sequence[Mapping[str, Any]], python: str) -> Dict[str, Any]:
    first = members[0]
    failure_type = _str(first.get("failure_type"), UNKNOWN)
    message = normalised_message(first)
    nodeids = _unique([s for s in (_selection(m) for m in members) if s is not None])
    targets: List[str] = []
    for member in members:
        paths = member.get("target_paths")
        if isinstance(paths, list):
            targets.extend(p for p in paths if isinstance(p, str) and p)
        selection = _selection(member)
        test_file = _test_file(selection) if selection is not None else None
        if test_file is not None:
            targets.append(test_file)
    targets = _unique(targets)
    verb = _type_info(failure_type)[0]
    count = f" ({len(nodeids)} tests)" if len(nodeids) > 1 else f" in {nodeids[0]}" if nodeids else ""
    return {
        "id": f"A{index}",
        "title": f"{verb}{count}: {_shorten(message) or failure_type}",
        "priority": _priority(members),
        "risk": _risk(targets),
        "target_paths": targets,
        "verification": [pytest_command(nodeids, python=python) if nodeids else _collect_only(python)],
        "fingerprint": _short_hash(f"{failure_type} | {message}"),
        "fingerprints": _unique([_str(m.get("fingerprint")) for m in members if m.get("fingerprint")]),
        "signature": f"{failure_type} | {message}",
        "failure_type": failure_type,
        "nodeids": nodeids,
    }


def _hypotheses(
    actions: Sequence[Mapping[str, Any]], groups: Sequence[Sequence[Mapping[str, Any]]]
) -> List[Dict[str, Any]]:
    by_type: Dict[str, List[int]] = {}
    for i, action in enumerate(actions):
        by_type.setdefault(str(action["failure_type"]), []).append(i)
    hypotheses: List[Dict[str, Any]] = []
    for n, (failure_type, indexes) in enumerate(by_type.items(), start=1):
        _, reason, confidence = _type_info(failure_type)
        if any(m.get("transient") is True for i in indexes for m in groups[i]):
            # Transient classes: a re-run may pass; the code may be fine.
            reason += "; the failure looks transient (a re-run may pass)"
            confidence = "low"
        example = actions[indexes[0]]
        ids = ", ".join(str(actions[i]["id"]) for i in indexes)
        where = example["nodeids"][0] if example["nodeids"] else failure_type
        hypotheses.append(
            {
                "id": f"H{n}",
                "confidence": confidence,
                "reason": f"{ids}: {reason} ({where}: {_shorten(normalised_message(groups[indexes[0]][0]), 120)})",
                "actions": [actions[i]["id"] for i in indexes],
                "failure_type": failure_type,
            }
        )
    return hypotheses


def build_plan(incident: Mapping[str, Any], *, generated_at: str, python: str = "python") -> Dict[str, Any]:
    """The ``plan.json`` document for ``incident`` (SPEC §7), revision 1.

    ``generated_at`` is passed in (ISO-8601 UTC) so the function stays pure. ``python`` is
    the interpreter written at the head of the verification commands.
    """
    incident_id = incident.get("incident_id")
    if not isinstance(incident_id, str) or not incident_id:
        raise InputError("incident.json: 'incident_id' must be a non-empty string")
    failures = _failures(incident)
    groups = group_failures(failures)
    actions = [_action(i, members, python) for i, members in enumerate(groups, start=1)]
    all_nodeids = _unique([n for a in actions for n in a["nodeids"]])
    first = actions[0]
    tests = len(all_nodeids)
    summary = (
        f"{tests} failing test{'s' if tests != 1 else ''} in {len(actions)} failure "
        f"group{'s' if len(actions) != 1 else ''}; first: "
        f"{first['nodeids'][0] if first['nodeids'] else _str(incident.get('step'), 'unknown')} — "
        f"{first['failure_type']}: {_shorten(normalised_message(groups[0][0]), 120)}"
    )
    return {
        "incident_id": incident_id,
        "generated_at": generated_at,
        "revision": 1,
        "summary": summary,
        "root_cause_hypotheses": _hypotheses(actions, groups),
        "actions": actions,
        "verification_commands": [
            pytest_command(all_nodeids, python=python) if all_nodeids else _collect_only(python)
        ],
        "done_criteria": list(DONE_CRITERIA),
    }


def verification_argv(plan: Mapping[str, Any]) -> List[List[str]]:
    """The plan's ``verification_commands`` as argv lists (``shlex.split``, never a shell).

    Raises :class:`~pytest_selfheal.errors.InputError` for a hand-edited plan whose
    commands are missing, not strings, empty or unbalanced in their quoting.
    """
    commands = plan.get("verification_commands")
    if not isinstance(commands, list):
        raise InputError("plan.json: 'verification_commands' must be a list of strings")
    argvs: List[List[str]] = []
    for i, command in enumerate(commands):
        if not isinstance(command, str):
            raise InputError(f"plan.json: verification_commands[{i}] must be a string")
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise InputError(f"plan.json: verification_commands[{i}] cannot be parsed ({exc})") from None
        if not argv:
            raise InputError(f"plan.json: verification_commands[{i}] is empty")
        argvs.append(argv)
    return argvs


def _revision(plan: Mapping[str, Any]) -> int:
    value = plan.get("revision", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


# --------------------------------------------------------------------------- markdown


def _cell(value: Any) -> str:
    text = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split()) or "—"


def _fence(text: str) -> str:
    # A fence longer than any backtick run inside, so a command can never close it.
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _code_block(text: str, lang: str = "sh") -> List[str]:
    fence = _fence(text)
    return [f"{fence}{lang}", text, fence]


def render_plan_md(plan: Mapping[str, Any]) -> str:
    """``plan.md``: title, summary, hypotheses, an actions table, commands, done criteria."""
    lines: List[str] = [f"# Remediation plan: {plan.get('incident_id', '?')}", ""]
    meta = f"Generated {plan.get('generated_at', '?')}"
    revision = _revision(plan)
    if revision > 1:
        meta += f" · revision {revision}"
    lines += [meta, "", "## Summary", "", str(plan.get("summary", "")), ""]
    lines += ["## Root-cause hypotheses", ""]
    for hyp in plan.get("root_cause_hypotheses", []):
        lines.append(f"- **{hyp.get('id')}** ({hyp.get('confidence')}): {hyp.get('reason')}")
    lines += ["", "## Actions", ""]
    lines += [
        "| ID | Priority | Risk | Title | Target paths | Tests |",
        "|----|----------|------|-------|--------------|-------|",
    ]
    for action in plan.get("actions", []):
        tests = action.get("nodeids", [])
        lines.append(
            "| "
            + " | ".join(
                _cell(v)
                for v in (
                    action.get("id", ""),
                    action.get("priority", ""),
                    action.get("risk", ""),
                    action.get("title", ""),
                    action.get("target_paths", []),
                    tests if isinstance(tests, list) else [],
                )
            )
            + " |"
        )
    for action in plan.get("actions", []):
        lines += ["", f"### {action.get('id')}: {action.get('title')}", ""]
        if action.get("signature"):
            signature = " ".join(str(action["signature"]).split()).replace("`", "'")
            lines += [f"Signature: `{signature}`", ""]
        for command in action.get("verification", []):
            lines += _code_block(str(command))
    lines += ["", "## Verification commands", ""]
    for command in plan.get("verification_commands", []):
        lines += _code_block(str(command))
    lines += ["", "## Done criteria", ""]
    lines += [f"- [ ] {c}" for c in plan.get("done_criteria", [])]
    history = plan.get("replan_history")
    if isinstance(history, list) and history:
        lines += ["", "## Previous attempts", ""]
        for entry in history:
            fps = ", ".join(entry.get("fingerprints_seen", [])) or "none"
            lines.append(
                f"- Revision {entry.get('revision')}: {entry.get('iterations')} iteration(s), fingerprints seen: {fps}"
            )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- replan

_LOWER = {"high": "medium", "medium": "low", "low": "low"}


def _attempt_fingerprints(attempt: Mapping[str, Any]) -> List[str]:
    failures = attempt.get("failures")
    if isinstance(failures, list):
        fps = [f.get("fingerprint") for f in failures if isinstance(f, Mapping)]
        return [fp for fp in fps if isinstance(fp, str) and fp]
    signature = attempt.get("error_signature")
    return [signature] if isinstance(signature, str) and signature else []


def replan(
    plan: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]], *, generated_at: Optional[str] = None
) -> Dict[str, Any]:
    """A new revision of ``plan`` after ``replan_requested``: what was tried is written in.

    ``attempts`` are the ``attempt_XX.json`` records of the run that asked for the
    replan. The summary gains a note of the iterations and fingerprints seen, the old
    hypotheses lose one confidence level (they did not pan out), a new hypothesis says
    the cause may lie outside the plan's target paths, and ``revision`` is bumped.
    """
    new = copy.deepcopy(dict(plan))
    revision = _revision(plan)
    fingerprints = _unique([fp for a in attempts for fp in _attempt_fingerprints(a)])
    iterations = len(attempts)
    applied = _unique([str(x) for a in attempts for x in (a.get("actions_applied") or []) if isinstance(x, str)])
    note = (
        f"Revision {revision + 1}: {iterations} iteration{'s' if iterations != 1 else ''} "
        f"of revision {revision} made no "
        f"progress (fingerprints seen: {', '.join(fingerprints) or 'none'}"
        + (f"; actions tried: {', '.join(applied)}" if applied else "")
        + ")."
    )
    # The summary carries only the latest note; replan_history keeps them all.
    base_summary = str(plan.get("base_summary") or plan.get("summary", ""))
    new["base_summary"] = base_summary
    joiner = " " if not base_summary or base_summary.endswith((".", "!", "?")) else ". "
    new["summary"] = f"{base_summary}{joiner}{note}".strip()
    hypotheses = [dict(h) for h in plan.get("root_cause_hypotheses", []) if isinstance(h, Mapping)]
    for hyp in hypotheses:
        hyp["confidence"] = _LOWER.get(str(hyp.get("confidence")), "low")
    targets = _unique(
        [
            p
            for a in plan.get("actions", [])
            if isinstance(a, Mapping)
            for p in (a.get("target_paths") or [])
            if isinstance(p, str)
        ]
    )
    hypotheses.append(
        {
            "id": f"H{len(hypotheses) + 1}",
            "confidence": "medium",
            "reason": (
                f"The previous plan did not make progress after {iterations} iteration"
                f"{'s' if iterations != 1 else ''}: the root cause may lie outside its target paths "
                f"({', '.join(targets) or 'none'}), e.g. in shared fixtures, configuration or a dependency"
            ),
            "actions": [],
            "failure_type": "",
        }
    )
    new["root_cause_hypotheses"] = hypotheses
    new["revision"] = revision + 1
    history = list(plan.get("replan_history", []) or [])
    history.append({"revision": revision, "iterations": iterations, "fingerprints_seen": fingerprints})
    new["replan_history"] = history
    if generated_at is not None:
        new["generated_at"] = generated_at
    return new
