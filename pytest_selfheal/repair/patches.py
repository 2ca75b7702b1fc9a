"""A repair's patches in ``error_runs/<id>/`` (edge: the store, git; docs/repair.md), what
they do, and applying the proposed one.

Patches are kept byte for byte, never redacted: they must apply. What a patch does is read as
``git apply`` reads it, before anyone approves it; a symlink leaving the repository and
(unless ``repair.allow_binary``) a binary change are refused before the question. Approval is
the caller's, between :func:`proposed_patch` and :func:`apply_proposed`.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.testfiles import patch_test_files
from pytest_selfheal.errors import NotFoundError, RefusedError, printable
from pytest_selfheal.gitrepo import GitFailed, isolated_git_env, repo_top, run_git
from pytest_selfheal.loop.argcheck import inside_root
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.records.jsondoc import every_key
from pytest_selfheal.records.run_result import RunRepair
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.repair.worktree import apply_patch, check_patch
from pytest_selfheal.store import fsio
from pytest_selfheal.store.events import format_ts
from pytest_selfheal.store.root import Store

FINAL_PATCH = "final.patch"


def write_patch(store: Store, incident_id: str, name: str, data: bytes) -> Path:
    """Write a patch into ``error_runs/<id>/`` atomically, byte for byte (a Latin-1 source file too)."""
    try:
        return store.write_run_file(incident_id, name, data.decode("utf-8"), raw=True)
    except UnicodeDecodeError:
        store.write_run_file(incident_id, name, "", raw=True)  # validates the name and the incident
    with store.lock():
        path = store.confined(store.runs_dir(incident_id) / name)
        fsio.atomic_write_bytes(path, data)
        return path


def read_run_bytes(store: Store, incident_id: str, name: str) -> Optional[bytes]:
    path = store.runs_dir(incident_id) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None


def apply_command(store: Store, incident_id: str) -> str:
    """``selfheal apply ID``, with ``--dir`` when the reports root is not ``./.selfheal``."""
    root = store.root.resolve()
    dir_option = "" if root == Path.cwd().resolve() / ".selfheal" else f" --dir {shlex.quote(str(root))}"
    return f"selfheal apply {incident_id}{dir_option}"


SYMLINK_MODE = "120000"


@dataclass(frozen=True)
class PatchSummary:
    files: tuple[str, ...]  # every path git would write, in patch order, each once
    notes: tuple[str, ...]  # git's summary: "create mode 100644 x", "rename a => b (90%)", ...
    binary: tuple[str, ...]  # paths whose change is binary
    symlinks: tuple[tuple[str, Optional[str]], ...]  # (link, target; None: not found in the patch)
    # The tests, conftests and fixtures it writes, deletes or moves away (a rename's source too).
    test_files: tuple[str, ...] = ()

    def text(self) -> str:
        """One line for the approval question: the files, then what is special about them."""
        parts = [f"{len(self.files)} file(s): {', '.join(self.files)}"]
        parts.extend(self.notes)
        parts.extend(f"symlink {link} -> {target if target is not None else '?'}" for link, target in self.symlinks)
        if self.binary:
            parts.append(f"binary: {', '.join(self.binary)}")
        # A file name may hold a line break, an escape sequence or a bidi override that would
        # redraw or reorder the question on a terminal: shown escaped (``\n``, ``\x1b``, ``\u202e``).
        return printable("; ".join(parts))


def _symlink_targets(patch: bytes) -> list[tuple[str, Optional[str]]]:
    """``(link, target)`` of every section that makes a symlink (the target is its added line)."""
    found: list[tuple[str, Optional[str]]] = []
    for section in re.split(rb"(?m)^(?=diff --git )", patch):
        head, _, body = section.decode("utf-8", errors="surrogateescape").partition("\n@@")
        lines = head.split("\n")
        if not lines[0].startswith("diff --git ") or not any(
                line.rstrip() in (f"new file mode {SYMLINK_MODE}", f"new mode {SYMLINK_MODE}") for line in lines):
            continue
        link = lines[0].rsplit(" b/", 1)[-1] if " b/" in lines[0] else lines[0][len("diff --git "):]
        link = next((line[4:].strip()[2:] for line in lines if line.startswith("+++ b/")), link)
        found.append((link, next((line[1:] for line in body.split("\n")[1:] if line.startswith("+")), None)))
    return found


def summarise(top: Path, patch: bytes) -> PatchSummary:
    """``patch`` as git reads it against the tree at ``top``; RefusedError when git cannot."""
    try:
        numstat = run_git(top, ["apply", "--numstat", "-z"], stdin=patch)
        summary = run_git(top, ["apply", "--summary"], stdin=patch).decode("utf-8", errors="replace")
    except GitFailed as exc:
        raise RefusedError(f"the patch cannot be read by git apply: {exc.first_line}") from None
    files: dict[str, None] = {}
    binary: dict[str, None] = {}
    for entry in filter(None, numstat.split(b"\0")):
        added, _, rest = entry.partition(b"\t")
        path = rest.partition(b"\t")[2].decode("utf-8", errors="replace")
        if path:
            files[path] = None
        if added == b"-":
            binary[path] = None
    notes = tuple(line.strip() for line in summary.splitlines() if line.strip())
    tests = [f for f in files if is_test_file(f)] + patch_test_files(patch.decode("utf-8", errors="replace"))
    return PatchSummary(tuple(files), notes, tuple(binary), tuple(_symlink_targets(patch)), tuple(dict.fromkeys(tests)))


def refusal(summary: PatchSummary, top: Path, *, allow_binary: bool) -> Optional[str]:
    """Why the patch is refused before any question, or None."""
    outside = [f"{link} -> {target}" for link, target in summary.symlinks if not target or "\x00" in target
               or not inside_root(target if target.startswith("/") else posixpath.join(posixpath.dirname(link), target), top)]
    if outside:
        return f"the patch makes a symlink pointing outside the repository ({', '.join(outside)})"
    if summary.binary and not allow_binary:
        return (f"the patch changes binary file(s) ({', '.join(summary.binary)}), which cannot be reviewed as a "
                "diff; set ralf_lite.repair.allow_binary: true to allow it")
    return None


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
    """The proposed patch of ``incident_id``, checked, nothing changed: NotFoundError when there
    is none, RefusedError when it does not apply cleanly or is refused (a symlink out of the
    repository, a binary change, a test edit: approval never covers those)."""
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
    asked) and note it in ``run_result.json``."""
    with isolated_git_env():
        apply_patch(proposed.working_tree, proposed.patch)
    incident_id, top = proposed.incident_id, proposed.working_tree
    existing = store.read_run_result(incident_id)
    if existing is None:
        return
    block = existing.repair if existing.repair is not None else RunRepair(keys=())
    read = block.keys or ()
    repair = dataclasses.replace(
        block, final_patch=block.final_patch or "final.patch", applied=True, applied_at=format_ts(),
        applied_to=str(top), apply_command=None, message=f"applied to {top} with `selfheal apply`",
        # Every key this sets written, nulls too.
        keys=(*read, *(key for key in every_key(RunRepair, "files_changed", "provider_calls") if key not in read)),
    )
    store.write_run_result(incident_id, dataclasses.replace(existing, repair=repair))

