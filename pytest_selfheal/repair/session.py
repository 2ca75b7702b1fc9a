"""One repair run: the loop with a provider in an isolated worktree (edge: git; docs/repair.md).

:func:`repair_loop` wraps the loop with a worktree of the user's state (replaying the last
accepted patch on resume), the provider, and the close-out: the final patch and the
approval to apply it. The worktree is removed whatever happens, Ctrl-C included.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from pytest_selfheal import hooks
from pytest_selfheal.analysis.rules import Rule, parse_hook_rules
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import isolated_git_env
from pytest_selfheal.loop import driver as loop
from pytest_selfheal.loop.codepath import redirect_to_worktree
from pytest_selfheal.loop.policy import REPAIR_DIFF, reopened_after
from pytest_selfheal.loop.resume import split_runs
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.repair import WorktreeRecord
from pytest_selfheal.records.run_result import LoopResult, RunRepair
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.repair.approval import Approver, approver_from
from pytest_selfheal.repair.patches import FINAL_PATCH, apply_command, read_run_bytes, refusal, summarise, write_patch
from pytest_selfheal.repair.provider import RepairSession
from pytest_selfheal.repair.worktree import (
    Worktree,
    apply_patch,
    check_patch,
    create,
    remove_recorded,
    worktree_record,
)
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    import pluggy


WORKTREE_RECORD = "worktree.json"

Say = Callable[[str], None]


def _accepted_patch(attempts: Sequence[Attempt], reopened: Optional[int]) -> Optional[str]:
    """The patch of the latest accepted diff of the current run (resume after a kill)."""
    _, run = split_runs(attempts, reopened)
    for attempt in reversed(run):
        repair = attempt.repair
        if repair is not None and repair.result == REPAIR_DIFF and not repair.scope_denied and repair.patch is not None:
            return repair.patch
    return None


def _remove_stale(store: Store, incident_id: str) -> None:
    path = store.runs_dir(incident_id) / WORKTREE_RECORD
    try:
        record = WorktreeRecord.from_json(fsio.read_json(path), str(path))
    except SelfhealError:
        return  # none, or unreadable: nothing known to remove
    remove_recorded(record)


def repair_loop(
    store: Store,
    incident_id: str,
    *,
    effective: EffectiveConfig,
    project_root: Path,
    approve: bool = False,
    interactive: Optional[bool] = None,
    pluginmanager: Optional[pluggy.PluginManager] = None,
    out: Optional[Say] = None,
    input_fn: Optional[Callable[[str], str]] = None,
    env: Optional[Mapping[str, str]] = None,
    hook_rules: Optional[Sequence[Rule]] = None,
    unattended: Optional[bool] = None,
    incident: Optional[Incident] = None,
    state: Optional[LoopRun] = None,
) -> LoopResult:
    """Run (or resume) the loop with a repair provider in an isolated worktree (``RefusedError``
    outside git), write ``final.patch`` and, when the incident is resolved and approved, apply
    it to the user's working tree; else say ``selfheal apply ID``. ``hook_rules`` None asks
    ``pluginmanager``, so verification runs classify like the capture."""
    incident_id = validate_incident_id(incident_id)
    say: Say = out or (lambda line: None)
    pm = pluginmanager if pluginmanager is not None else hooks.cli_plugin_manager()
    approver = approver_from(
        approve=approve, config_approve=effective.settings.repair.approve, interactive=interactive, input_fn=input_fn
    )
    rules = list(hook_rules) if hook_rules is not None else parse_hook_rules(hooks.classification_rules(pm))
    with isolated_git_env():
        store.locate(incident_id)  # an unknown id fails before a worktree is made
        _remove_stale(store, incident_id)
        wt = create(Path(project_root), name=incident_id, exclude=[store.root])
        try:
            store.write_run_file(incident_id, WORKTREE_RECORD, fsio.dumps_json(worktree_record(wt).to_json()))
            incident = state.incident if state is not None else incident or store.read_incident(incident_id)
            attempts = state.attempts if state is not None else store.read_attempts(incident_id)
            accepted = _accepted_patch(attempts, reopened_after(incident))
            status = state.status if state is not None else store.read_status(incident_id) if accepted else None
            if accepted is not None and status == "running":
                data = read_run_bytes(store, incident_id, accepted)
                if data:
                    verdict = check_patch(wt.path, data)
                    if verdict.ok:
                        apply_patch(wt.path, data)
                        say(f"selfheal: incident {incident_id}: resumed the worktree from {accepted}")
                    else:
                        say(f"selfheal: warning: cannot replay {accepted} into the new worktree ({verdict.error}); "
                            "the repair starts again from your working tree")
            session = RepairSession(
                store, incident_id, effective=effective, worktree=wt, approver=approver, pluginmanager=pm, say=say,
                env=env,
            )
            # The verification imports the worktree's code, also through editable installs.
            redirect = redirect_to_worktree(os.environ if env is None else env, Path(project_root), wt.project_root)
            if redirect.missing:
                say(f"selfheal: incident {incident_id}: cannot point {', '.join(redirect.missing)} at the repair "
                    "worktree (not in git there): verification runs may import your working tree's code")
                session.not_redirected = list(redirect.missing)  # recorded in each attempt's repair block
            result = loop.run_loop(
                store, incident_id, effective=effective, project_root=wt.project_root, provider=session,
                approve=approve, out=say, env=redirect.env, hook_rules=rules, unattended=unattended,
                incident=incident, state=state,
            )
            return _close_out(store, incident_id, result, wt=wt, session=session, approver=approver, say=say,
                              state=state)
        finally:
            wt.remove()
            for warning in wt.warnings:
                say(f"selfheal: warning: {warning}")
            try:
                (store.runs_dir(incident_id) / WORKTREE_RECORD).unlink()
            except OSError:
                pass


# The run result's repair block, every key written in this order.
_RUN_REPAIR_KEYS = ("final_patch", "applied", "apply_command", "files_changed", "message", "provider_calls")


def _close_out(
    store: Store,
    incident_id: str,
    result: LoopResult,
    *,
    wt: Worktree,
    session: RepairSession,
    approver: Approver,
    say: Say,
    state: Optional[LoopRun] = None,
) -> LoopResult:
    """final.patch, approval, apply; the run result's ``repair`` block."""
    final_tree = wt.snapshot()
    patch = wt.diff(wt.base, final_tree)
    files = wt.project_relative(wt.changed_files(wt.base, final_tree))
    resolved = result.final_status == FinalStatus.RESOLVED
    final_patch: Optional[str] = None
    applied = False
    command: Optional[str] = None  # the apply command, when the patch may be applied by hand
    message = ""
    if patch.strip():
        path = write_patch(store, incident_id, FINAL_PATCH, patch)
        final_patch = FINAL_PATCH
        store.append_event(
            incident_id, ev.DIFF_PROPOSED, iteration=result.iteration, kind="final", diffId=FINAL_PATCH,
            patch=FINAL_PATCH, files_changed=files, final=True,
        )
        text = patch.decode("utf-8", errors="replace")
        if session.redactor.redact(text) != text:
            say(f"selfheal: warning: {path} contains text that looks like a secret; patches are kept unredacted "
                "so that they apply — review it before sharing")
        suggested = apply_command(store, incident_id)
        # What the patch does, from the whole patch as git reads it (not the changed-file list).
        described = summarise(wt.repo_top, patch)
        if not resolved and described.test_files:
            # Approval never covers a test edit: the person reviews it, and allows it deliberately or not at all.
            tests = ", ".join(described.test_files)
            message = (f"a patch that edits test files ({tests}) is proposed for review ({FINAL_PATCH}); "
                       "it is not applied, and approval alone never applies it")
            say(f"selfheal: the loop did not resolve {incident_id}; the patch in {path} edits test files ({tests}): "
                f"review the test diff first (selfheal show {incident_id}); only if the tests were wrong, allow "
                f"the test edits deliberately: {suggested} --allow-test-edits")
        elif not resolved:
            message = (
                f"a partial patch is proposed ({FINAL_PATCH}); the incident is not resolved, so it is not applied"
            )
            say(f"selfheal: the loop did not resolve {incident_id}; the partial patch is in {path} "
                f"(apply it anyway with: {suggested})")
        else:
            refused = refusal(described, wt.repo_top, allow_binary=session.effective.settings.repair.allow_binary)
            summary = described.text()
            question = f"Apply the fix of {incident_id} ({summary}) to your working tree?"
            verdict = check_patch(wt.repo_top, patch)
            if refused:
                message = f"not applied: {refused}"
                say(f"selfheal: {message}; it stays proposed in {path}")
            elif not verdict.ok:
                command = suggested
                message = f"not applied: the patch does not apply cleanly to your working tree ({verdict.error})"
                say(f"selfheal: {message}; it stays proposed in {path}")
            elif approver.confirm(question, details=session.redactor.redact(text)):
                try:
                    apply_patch(wt.repo_top, patch)
                except SelfhealError as exc:
                    command = suggested
                    message = f"not applied: {exc}"
                    say(f"selfheal: {message}")
                else:
                    applied = True
                    who = "approved up front" if approver.approved else "approved at the prompt"
                    message = f"applied to {wt.repo_top} ({who}): {summary}"
                    say(f"selfheal: fix applied to your working tree: {summary}")
            else:
                command = suggested
                message = f"proposed, not applied (no approval: {approver.how}); apply with `{command}`"
                say(f"selfheal: the fix is proposed, not applied: {path}")
                say(f"selfheal: to apply it run: {command}")
    else:
        # A previous run's partial patch (before a replan) must not be applied by mistake.
        with store.lock():
            try:
                (store.runs_dir(incident_id) / FINAL_PATCH).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise fsio.io_error("remove", store.runs_dir(incident_id) / FINAL_PATCH, exc) from None
        message = "no change was proposed" if not resolved else "resolved without a code change"
    repair = RunRepair(
        final_patch=final_patch, applied=applied, apply_command=command, files_changed=tuple(files), message=message,
        provider_calls=len(session.results), keys=_RUN_REPAIR_KEYS,
    )
    existing = state.run_result if state is not None else store.read_run_result(incident_id)
    if existing is not None and (existing.iteration, existing.stop_reason) == (result.iteration, result.stop_reason):
        written = dataclasses.replace(existing, repair=repair)
        store.write_run_result(incident_id, written)
        if state is not None:
            state.run_result = written
    return dataclasses.replace(result, repair=repair)
