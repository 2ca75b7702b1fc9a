"""``selfheal show ID``: one incident, with what a person reviews: the proposed patch (before
``selfheal apply``) and the failing tests' files edited since the capture (a ``tests_edited`` stop)."""

from __future__ import annotations

import argparse
import difflib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.analysis.testfiles import MISSING, changed, is_recorded, patch_test_files, tests_first
from pytest_selfheal.cli.common import incident_from_args, print_json, project_redactor, project_root
from pytest_selfheal.cli.options import command, on_incident
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.mcp_server.digest import attempt_lines, failures_by_id, first_lines, group_block, ranked_causes
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.repair.patches import FINAL_PATCH, proposed_patch, read_run_bytes
from pytest_selfheal.report.incident_view import incident_view
from pytest_selfheal.store.root import Store

# Root causes and plan actions listed (10,000 failures made 500 of each): the rest counted, all in --json.
_SHOWN_GROUPS = 20

# Of the proposed patch shown (text and JSON): the whole file stays in error_runs/ID/.
PATCH_LINES = 200

PATCH_CHARS = 16_000


@dataclass(frozen=True)
class ShownPatch:
    """The proposed patch as ``show`` prints it: redacted, test sections first, bounded."""

    path: str  # relative to the reports root
    applied: bool  # in the working tree now
    test_files: tuple[str, ...]
    text: str
    total_lines: int
    shown_lines: int
    undone: bool = False  # applied by the loop, no longer in the working tree (stashed, reverted)

    def to_json(self) -> dict[str, object]:
        return {key: value for key, value in asdict(self).items() if key != "undone"}


def shown_patch(store: Store, view: IncidentView) -> Optional[ShownPatch]:
    """The incident's ``final.patch`` for review, or None. Patches are kept unredacted so that
    they apply; what is shown is redacted."""
    data = read_run_bytes(store, view.incident_id, FINAL_PATCH)
    if not data or not data.strip():
        return None
    text = tests_first(project_redactor().redact(data.decode("utf-8", errors="replace")))
    repair = view.run_result.repair if view.run_result is not None else None
    path = (store.runs_dir(view.incident_id) / FINAL_PATCH).relative_to(store.root).as_posix()
    recorded = bool(repair is not None and repair.applied)
    applied = recorded and _in_the_tree(store, view.incident_id)
    return ShownPatch(path, applied, tuple(patch_test_files(text)), *_bounded(text), undone=recorded and not applied)


def _bounded(text: str) -> tuple[str, int, int]:
    """``(text shown, its lines, lines shown)``, within PATCH_LINES and PATCH_CHARS."""
    lines = text.splitlines()
    shown = first_lines("\n".join(lines[:PATCH_LINES]), PATCH_CHARS)
    return shown, len(lines), shown.count("\n") + 1 if shown else 0


@dataclass(frozen=True)
class TestEdits:
    """The failing tests' files edited since the capture, and their diff against it."""

    __test__ = False  # not a pytest test class, whatever imports it

    files: tuple[str, ...]
    text: str  # redacted, bounded
    total_lines: int
    shown_lines: int
    not_in_git: tuple[str, ...]  # edited, but git does not hold their captured content


def test_edits(store: Store, view: IncidentView) -> Optional[TestEdits]:
    """The test files (``test_digests``) that differ from the capture, diffed where git has
    the captured content; None when none differs."""
    recorded = dict(view.incident.test_digests)
    root = Path(view.incident.rootdir) if view.incident.rootdir else project_root()
    if not root.is_dir():  # captured elsewhere (a CI run's records): nothing here to compare
        return None
    edited = changed(root, recorded)
    if not edited:
        return None
    try:
        git = store.read_context(view.incident_id).git
    except SelfhealError:
        git = None
    commit = git.commit if git is not None else None
    sections: list[str] = []
    unknown: list[str] = []
    for path in edited:
        before = _captured(root, commit, path, recorded[path])
        if before is None:
            unknown.append(path)
            continue
        try:
            after = (root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            after = ""
        sections.append("".join(difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            f"a/{path} (capture)", "/dev/null" if not (root / path).exists() else f"b/{path} (now)")))
    return TestEdits(tuple(edited), *_bounded(project_redactor().redact("".join(sections))), tuple(unknown))


def _captured(root: Path, commit: Optional[str], path: str, recorded: str) -> Optional[str]:
    """The file as captured: "" when absent, else its content at the capture's commit if that
    is what was recorded; None when git cannot tell."""
    if recorded == MISSING:
        return ""
    if not commit:
        return None
    try:
        data = run_git(root, ["show", f"{commit}:./{path}"])
    except GitFailed:
        return None
    return data.decode("utf-8", errors="replace") if is_recorded(data, recorded) else None


def _in_the_tree(store: Store, incident_id: str) -> bool:
    """Whether the applied ``final.patch`` is still in the working tree; True when git cannot tell."""
    try:
        return proposed_patch(store, incident_id, project_root(), allow_binary=True,
                              allow_test_edits=True).already_applied
    except SelfhealError:
        return True


class _Code(str):
    """A line of code: shown with its indentation (only line breaks and tabs flattened)."""


def _flat(value: Any) -> str:
    if isinstance(value, _Code):
        return "".join(" " if ch in "\r\n\t\v\f" else ch for ch in value).rstrip()
    return " ".join(str("-" if value is None else value).split())


def _shown(text: str, shown: int, total: int, rest: str) -> list[tuple[str, object]]:
    """A bounded diff's rows, then what was left out (``rest``: where it is)."""
    rows: list[tuple[str, object]] = [("", _Code(f"  {line}")) for line in text.splitlines()]
    if shown < total:
        rows.append(("", f"(first {shown} of {total} lines{rest})"))
    return rows


def format_text(view: IncidentView, patch: Optional[ShownPatch] = None, edits: Optional[TestEdits] = None) -> str:
    incident = view.incident
    rows: list[tuple[str, object]] = [
        ("incident", view.incident_id),
        ("status", f"{view.status} ({view.bucket}: {view.path})"),
        ("created", incident.created_at),
        ("updated", incident.updated_at),
        ("run", incident.run_id),
        ("step", incident.step),
        ("class", incident.failure_class),
        ("signature", incident.error_signature),
        ("message", incident.message),
    ]
    if "failures" in (incident.keys or ("failures",)):
        rows.append(("failures", f"{len(incident.failures)} in {len(view.root_causes)} root cause(s)"))
    causes = ranked_causes(view)
    failures = failures_by_id(incident.failures)
    for index, cause in enumerate(causes[:_SHOWN_GROUPS], 1):
        block = group_block(index, len(causes), cause, failures, full=True)
        rows += [("", _Code(line)) for line in block.split("\n")]
    if len(view.root_causes) > _SHOWN_GROUPS:
        rows.append(("", f"... and {len(view.root_causes) - _SHOWN_GROUPS:,} more root cause(s) (--json lists them all)"))
    plan = view.plan
    if plan is None:
        rows.append(("plan", "none"))
    else:
        rows.append(("plan", f"{plan.summary} ({len(plan.actions)} actions, {len(plan.verification_commands)} verification commands)"))
        for action in plan.actions[:_SHOWN_GROUPS]:
            rows.append(("", f"{action.id}: {action.title}"))
        if len(plan.actions) > _SHOWN_GROUPS:
            rows.append(("", f"... and {len(plan.actions) - _SHOWN_GROUPS:,} more action(s) (plan.md, plan.json)"))
    rows.append(("attempts", len(view.attempts)))
    rows += [("", line) for line in attempt_lines(view)]
    result = view.run_result
    if result is None:
        rows.append(("run result", "none"))
    else:
        stop = f", stop_reason {result.stop_reason}" if result.stop_reason else ""
        rows.append(("run result", f"{result.final_status} after {result.loops_used} loops{stop}"))
        point = result.decision_point
        if point is not None and point.message:
            rows.append(("", f"why: {point.message}"))  # e.g. the missing module of a tooling_env stop
    if patch is not None:
        state = "applied" if patch.applied else (
            "applied by the loop, no longer in your working tree" if patch.undone else "proposed, not applied")
        tests = (f"; edits test files: {', '.join(patch.test_files)} (shown first: review them before any apply)"
                 if patch.test_files else "")
        rows.append(("patch", f"{patch.path} ({state}){tests}"))
        rows += _shown(patch.text, patch.shown_lines, patch.total_lines, f"; the whole patch: {patch.path}")
    if edits is not None:
        unknown = (f"; not in git as captured (see git diff): {', '.join(edits.not_in_git)}"
                   if edits.not_in_git else "")
        rows.append(("test edits", f"{', '.join(edits.files)} changed since the capture{unknown}"))
        rows += _shown(edits.text, edits.shown_lines, edits.total_lines, ": git diff shows the rest")
    rows.append(("events", view.events))
    for warning in view.warnings:
        rows.append(("warning", warning))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {_flat(value)}".rstrip() for label, value in rows)


@command("show", "show one incident: fields, status, failures grouped by root cause, plan summary, attempts, run "
                 "result", *on_incident("print the incident as JSON"))
def show_command(args: argparse.Namespace) -> int:
    store, incident_id = incident_from_args(args)
    view = incident_view(store, incident_id)
    patch = shown_patch(store, view)
    edits = test_edits(store, view)
    if args.json:
        print_json({**view.to_json(), "proposed_patch": patch.to_json() if patch is not None else None,
                    "test_edits": asdict(edits) if edits is not None else None})
    else:
        print(format_text(view, patch, edits))
    return 0
