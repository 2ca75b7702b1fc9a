"""Applying an incident's proposed patch (``final.patch``) to the working tree (edge).

The one home of the step for ``selfheal apply`` and the MCP ``apply`` tool. Approval is the
caller's job, between :func:`proposed_patch` and :func:`apply_proposed`: nothing here
applies a patch on its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_selfheal.errors import NotFoundError, RefusedError
from pytest_selfheal.gitrepo import isolated_git_env, repo_top
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.records.run_result import RunRepair
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.repair.patch_summary import PatchSummary, refusal, summarise
from pytest_selfheal.repair.patches import FINAL_PATCH, read_run_bytes
from pytest_selfheal.repair.worktree import apply_patch, check_patch
from pytest_selfheal.store.events import format_ts
from pytest_selfheal.store.root import Store


@dataclass(frozen=True)
class ProposedPatch:
    """An incident's proposed patch, checked against the working tree it would change."""

    incident_id: str
    patch: bytes
    path: Path  # error_runs/ID/final.patch
    working_tree: Path  # the top of the git repository it applies to
    summary: PatchSummary  # every file it writes, from the whole patch as git reads it
    already_applied: bool
    verified: bool = False  # the loop resolved the incident with it: its tests passed
    stop_reason: Optional[str] = None  # the loop's stop reason (run_result.json)

    @property
    def verdict(self) -> str:
        """Whether the patch was verified, in words: a partial patch says so."""
        if self.verified:
            return "verified: the incident's tests passed with it"
        if self.stop_reason == "tests_edited":
            return "NOT a verified fix: the incident's tests passed only with test files edited (review them first)"
        return (f"partial, NOT verified: the loop stopped with {self.stop_reason or 'no verdict'} "
                "and the incident's tests did not pass with it")

    @property
    def files(self) -> list[str]:
        return list(self.summary.files)

    @property
    def question(self) -> str:
        """The one question a human answers: everything the patch writes, and whether it was verified."""
        return (f"Apply {FINAL_PATCH} of {self.incident_id} ({self.summary.text()}) to {self.working_tree}? "
                f"The patch is {self.verdict}.")


def proposed_patch(
    store: Store, incident_id: str, project_root: Path, *, allow_binary: bool = False, allow_test_edits: bool = False
) -> ProposedPatch:
    """The proposed patch of ``incident_id``, checked, nothing changed: no patch is a NotFoundError
    (4); one that does not apply cleanly, a symlink out of the repository, a binary change
    without ``allow_binary`` or a test edit without ``allow_test_edits`` (approval never covers
    test edits) a RefusedError (5)."""
    incident = store.read_incident(incident_id)
    patch = read_run_bytes(store, incident_id, FINAL_PATCH)
    where = store.runs_dir(incident_id) / FINAL_PATCH
    if patch is None or not patch.strip():
        raise NotFoundError(f"no proposed patch for incident {incident_id} (expected {where})")
    with isolated_git_env():
        top = repo_top(verification_root(incident, project_root, store.root))
        verdict = check_patch(top, patch)
        summary = summarise(top, patch)
    refused = refusal(summary, top, allow_binary=allow_binary)
    if refused:
        raise RefusedError(f"{FINAL_PATCH} of {incident_id} is refused: {refused}; nothing was changed")
    tests = summary.test_files
    if tests and not allow_test_edits and not verdict.already_applied:
        raise RefusedError(
            f"{FINAL_PATCH} of {incident_id} is refused: it edits test files ({', '.join(tests)}) and approval never "
            f"covers test edits; review the test diff (selfheal show {incident_id}), and only if the tests were wrong "
            f"allow them deliberately: selfheal apply {incident_id} --allow-test-edits (or "
            "ralf_lite.repair.allow_test_edits: true); nothing was changed"
        )
    if not verdict.ok and not verdict.already_applied:
        raise RefusedError(
            f"{FINAL_PATCH} of {incident_id} does not apply cleanly to {top} ({verdict.error}); nothing was changed"
        )
    result = store.read_run_result(incident_id)
    verified = result is not None and result.final_status == FinalStatus.RESOLVED
    return ProposedPatch(incident_id, patch, where, top, summary, verdict.already_applied,
                         verified, result.stop_reason if result is not None else None)


def apply_proposed(store: Store, proposed: ProposedPatch) -> None:
    """Apply an approved patch (checked again: the tree may have changed while a human was
    asked) and note it in ``run_result.json``'s ``repair`` block."""
    with isolated_git_env():
        apply_patch(proposed.working_tree, proposed.patch)
    _record_applied(store, proposed.incident_id, proposed.working_tree)


def _record_applied(store: Store, incident_id: str, top: Path) -> None:
    existing = store.read_run_result(incident_id)
    if existing is None:
        return
    block = existing.repair if existing.repair is not None else RunRepair(keys=())
    read = block.keys or ()
    repair = dataclasses.replace(
        block, final_patch=block.final_patch or "final.patch", applied=True, applied_at=format_ts(),
        applied_to=str(top), apply_command=None, message=f"applied to {top} with `selfheal apply`",
        keys=(*read, *(key for key in _APPLIED_KEYS if key not in read)),  # every one written, nulls too
    )
    store.write_run_result(incident_id, dataclasses.replace(existing, repair=repair))


_APPLIED_KEYS = ("final_patch", "applied", "applied_at", "applied_to", "apply_command", "message")
