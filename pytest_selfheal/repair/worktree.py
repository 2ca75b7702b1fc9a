"""Isolated git worktrees for repair providers (edge: git; docs/repair.md "Isolation").

A repair provider never edits the user's working tree. :func:`create` makes a linked
worktree (``git worktree add --detach``) in a temporary directory *outside* the
repository, holding exactly the user's current state:

1. the user's state is snapshotted as a git **tree** without touching their index or
   files: a copy of their index, ``git add -A`` into that copy (tracked changes, deletions
   and untracked non-ignored files), ``git write-tree``;
2. the worktree is added at the user's ``HEAD`` without checkout, the snapshot tree is
   checked out into it (``read-tree --reset -u``), and its index is reset to ``HEAD``;
3. the user's ignored files the code under test may need (generated ``_version.py``,
   compiled catalogues, data) are copied in, bounded, never environments or caches
   (:mod:`.carry`); they stay ignored, so they are in no snapshot and no patch.

So inside the worktree ``HEAD`` is the user's commit and ``git diff HEAD`` shows the
user's uncommitted changes exactly as in their own tree (the loop's progress hash is
comparable with the capture's). Every later state is again snapshotted as a tree; the
diff of a repair is ``diff-tree <before> <after>`` and the final patch is
``diff-tree <base> <final>`` — exactly the provider's changes, whatever it did to
``HEAD`` (agents that commit, like aider, are reset back after each call).

Every git command runs through ``gitrepo.run_git`` (gitpython, argv lists, never a shell),
with hooks disabled (``core.hooksPath`` pointing at an empty directory: no user hook
runs on ``worktree add``, ``reset`` or a ref update), and with plumbing commands
(``diff-tree``, ``read-tree``, ``write-tree``) where output must not depend on the
user's porcelain config (``diff.noprefix``, textconv, external diff drivers).

:func:`isolated_git_env` drops the variables that point git at a repository
(``GIT_DIR``, ``GIT_INDEX_FILE``… — set when pytest runs from a git hook) for a whole
repair run, so every git command finds the repository from its working directory.

Bytecode caches (``__pycache__``, ``*.pyc``) and ``.pytest_cache`` are left out of every
snapshot: verification runs create them in the worktree and they are never a repair.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.gitrepo import JUNK_PATHSPECS, GitFailed, repo_top, run_git
from pytest_selfheal.records.repair import WorktreeRecord
from pytest_selfheal.repair.carry import MAX_BYTES, MAX_FILES, carry_ignored

# Pathspecs left out of every snapshot (and so out of every patch).


def _relative_inside(path: Path, top: Path) -> Optional[str]:
    try:
        rel = Path(os.path.realpath(path)).relative_to(Path(os.path.realpath(top)))
    except ValueError:
        return None
    text = rel.as_posix()
    return "" if text == "." else text


def exclude_pathspecs(top: Path, exclude: Sequence[Path]) -> list[str]:
    """``:(exclude)`` pathspecs for the paths in ``exclude`` that lie inside ``top`` (the
    reports root, usually), plus the junk caches."""
    specs: list[str] = []
    for path in exclude:
        rel = _relative_inside(path, top)
        if rel and not _ignored(top, rel):
            # An ignored path is left out anyway, and naming it makes `git add` fail.
            specs.append(f":(exclude,literal){rel}")
    return specs + list(JUNK_PATHSPECS)


def _ignored(top: Path, rel: str) -> bool:
    try:
        run_git(top, ["check-ignore", "-q", "--", rel])
    except GitFailed:
        return False  # exit 1: not ignored (128: an error, and excluding is the safe side)
    return True


def _git_path(cwd: Path, name: str, hooks_dir: Optional[Path] = None) -> Path:
    out = run_git(cwd, ["rev-parse", "--git-path", name], hooks_dir=hooks_dir).decode().strip()
    path = Path(out)
    return path if path.is_absolute() else (cwd / path)


def snapshot_tree(
    top: Path, scratch: Path, excludes: Sequence[str], *, hooks_dir: Optional[Path] = None
) -> str:
    """The git tree of the working tree at ``top`` as it is now (tracked changes, deletions,
    untracked non-ignored files), written without touching the real index or any file.

    A copy of the index (for its stat cache) takes the ``git add -A``; ``scratch`` is a
    private directory for that copy.
    """
    index = scratch / f"index.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        real = _git_path(top, "index", hooks_dir)
        try:
            shutil.copyfile(real, index)
        except OSError:
            pass  # no index yet, or unreadable: git builds one from scratch
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            run_git(top, ["add", "-A", "--", ".", *excludes], env=env, hooks_dir=hooks_dir)
        except GitFailed:
            # A copied index git cannot use (split index, odd extensions): start empty.
            if index.exists():
                index.unlink()
            run_git(top, ["add", "-A", "--", ".", *excludes], env=env, hooks_dir=hooks_dir)
        return run_git(top, ["write-tree"], env=env, hooks_dir=hooks_dir).decode().strip()
    finally:
        for leftover in (index, index.with_name(index.name + ".lock")):
            try:
                leftover.unlink()
            except OSError:
                pass


@dataclass
class Worktree:
    """A linked worktree holding the user's state; see the module docstring."""

    repo_top: Path  # the user's working tree (top of the repository)
    path: Path  # the worktree's top
    prefix: str  # the project root relative to repo_top, POSIX ("" at the top)
    head: str  # the user's HEAD commit (the worktree's HEAD)
    base: str  # tree of the user's state when the worktree was made
    excludes: tuple[str, ...]  # pathspecs left out of every snapshot
    scratch: Path  # private temp dir: holds the worktree, temp indexes, the empty hooks dir
    removed: bool = False
    warnings: list[str] = field(default_factory=list)
    carried: tuple[str, ...] = ()  # ignored files copied in (repository-relative), never in a patch

    @property
    def hooks_dir(self) -> Path:
        """The empty directory used as ``core.hooksPath``."""
        return self.scratch / "hooks"

    @property
    def project_root(self) -> Path:
        """The user's project root, inside the worktree."""
        return self.path / self.prefix if self.prefix else self.path

    def git(self, args: Sequence[str], env: Optional[Mapping[str, str]] = None) -> bytes:
        """Run git inside the worktree (hooks disabled)."""
        return run_git(self.path, args, env=env, hooks_dir=self.hooks_dir)

    @property
    def snapshot_index(self) -> Path:
        """The private index every snapshot of the worktree starts from: the ``base`` tree's
        (see :meth:`snapshot`)."""
        return self.scratch / "index.snapshot"

    def snapshot(self) -> str:
        """The tree of the worktree's current state.

        It starts from an index of the ``base`` tree, not from ``HEAD``'s: a file of the
        user's state that git ignores (staged with ``git add -f``, not committed) stays in
        every snapshot unless the provider deletes it, so no patch deletes it. Ignored files
        carried in (:mod:`.carry`) are in no index and stay out of every snapshot."""
        env = {"GIT_INDEX_FILE": str(self.snapshot_index)}
        self.git(["add", "-A", "--", ".", *self.excludes], env=env)
        return self.git(["write-tree"], env=env).decode().strip()

    def reset_head(self) -> None:
        """Point ``HEAD`` and the index back at the user's commit, keeping every file as it is
        (undoes commits a provider made, so ``git diff HEAD`` keeps meaning "vs the user's HEAD")."""
        self.git(["reset", "-q", self.head, "--"])

    def restore(self, tree: str) -> None:
        """Make the worktree's files equal ``tree`` (roll back a repair); ignored and junk
        files are left alone."""
        current = self.snapshot()
        if current == tree:
            self.reset_head()
            return
        index = self.scratch / f"index.restore.{os.urandom(4).hex()}"
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            # An index describing `current`, then a forced switch to `tree`: files of
            # `current` that `tree` lacks are removed, the others rewritten.
            self.git(["read-tree", current], env=env)
            self.git(["read-tree", "--reset", "-u", tree], env=env)
        finally:
            try:
                index.unlink()
            except OSError:
                pass
        self.reset_head()

    def diff(self, old: str, new: str) -> bytes:
        """The binary-safe patch from tree ``old`` to tree ``new``, paths relative to the
        repository top (``a/``/``b/`` prefixes, full blob ids): what ``git apply`` takes."""
        if old == new:
            return b""
        return self.git(["diff-tree", "-r", "-p", "--binary", "--full-index", "--no-color", old, new])

    def changed_files(self, old: str, new: str) -> list[str]:
        """Repository-relative POSIX paths that differ between trees ``old`` and ``new``."""
        if old == new:
            return []
        out = self.git(["diff-tree", "-r", "--name-only", "-z", old, new])
        return [os.fsdecode(name) for name in out.split(b"\0") if name]

    def project_relative(self, paths: Sequence[str]) -> list[str]:
        """Repository-relative paths as project-relative ones (``../x`` outside the project)."""
        if not self.prefix:
            return list(paths)
        head = self.prefix.rstrip("/") + "/"
        depth = len([p for p in self.prefix.split("/") if p])
        out = []
        for path in paths:
            out.append(path[len(head):] if path.startswith(head) else "../" * depth + path)
        return out

    def remove(self) -> None:
        """Remove the worktree (``git worktree remove --force`` + ``prune``) and the scratch
        directory. Never raises: problems are kept in ``warnings``."""
        if self.removed:
            return
        self.removed = True
        remove_worktree(self.repo_top, self.path, self.scratch, self.warnings)


def remove_worktree(repo: Path, path: Path, scratch: Optional[Path], warnings: Optional[list[str]] = None) -> None:
    """Remove a worktree of ``repo`` at ``path`` and its scratch directory; never raises."""
    notes = warnings if warnings is not None else []
    hooks = scratch / "hooks" if scratch is not None and (scratch / "hooks").is_dir() else None
    if path.exists():
        try:
            run_git(repo, ["worktree", "remove", "--force", "--force", str(path)], hooks_dir=hooks)
        except GitFailed as exc:
            notes.append(f"git worktree remove {path}: {exc.first_line}")
            shutil.rmtree(path, ignore_errors=True)
    try:
        run_git(repo, ["worktree", "prune"], hooks_dir=hooks)
    except GitFailed as exc:
        notes.append(f"git worktree prune: {exc.first_line}")
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def create(project_root: Path, *, name: str, exclude: Sequence[Path] = ()) -> Worktree:
    """A new worktree holding the current state of the repository containing ``project_root``.

    ``name`` names the worktree directory (and git's admin entry ``.git/worktrees/<name>``);
    ``exclude``: paths inside the repository left out (the reports root). The worktree
    lives in a fresh temporary directory outside the repository. Raises ``RefusedError``
    outside a git repository or when git fails.
    """
    top = repo_top(project_root)
    prefix = _relative_inside(project_root, top) or ""
    scratch = Path(tempfile.mkdtemp(prefix="selfheal-")).resolve()
    hooks = scratch / "hooks"
    hooks.mkdir()
    path = scratch / name
    excludes = tuple(exclude_pathspecs(top, exclude))
    added = False
    try:
        head = run_git(top, ["rev-parse", "--verify", "HEAD^{commit}"], hooks_dir=hooks).decode().strip()
        base = snapshot_tree(top, scratch, excludes, hooks_dir=hooks)
        run_git(top, ["worktree", "add", "--detach", "--no-checkout", str(path), head], hooks_dir=hooks)
        added = True
        wt = Worktree(top, path, prefix, head, base, excludes, scratch)
        # Check out the user's state, then point the index back at HEAD: the user's
        # uncommitted changes show up as uncommitted changes here too.
        wt.git(["read-tree", "--reset", "-u", base])
        # The index of `base` (with the stat data of the checkout) is where snapshots start.
        shutil.copyfile(_git_path(path, "index", hooks), wt.snapshot_index)
        wt.reset_head()
        carried = carry_ignored(top, path, [rel for rel in (_relative_inside(p, top) for p in exclude) if rel])
        wt.carried = carried.paths
        if carried.left_out:
            wt.warnings.append(
                f"{carried.left_out} ignored file(s) ({carried.left_out_bytes} bytes) were not copied into the repair "
                f"worktree (limit: {MAX_FILES} files, {MAX_BYTES // (1024 * 1024)} MiB); tests that need them may "
                "fail or skip there"
            )
        return wt
    except GitFailed as exc:
        if added:
            remove_worktree(top, path, scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        raise RefusedError(f"cannot create the repair worktree: {exc.first_line}") from None
    except BaseException:
        if added:
            remove_worktree(top, path, scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        raise


# --------------------------------------------------------------------------- patches


@dataclass(frozen=True)
class PatchCheck:
    """Whether a patch applies to a working tree: ``ok``, ``already_applied``, or neither
    (``error`` holds git's first error line)."""

    ok: bool
    already_applied: bool
    error: str


def with_patch_file(patch: bytes, fn: Any) -> Any:
    """``fn(path)`` of a temporary file holding ``patch`` (removed afterwards), for git apply."""
    handle, name = tempfile.mkstemp(prefix="selfheal-", suffix=".patch")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(patch)
        return fn(Path(name))
    finally:
        try:
            os.unlink(name)
        except OSError:
            pass


_APPLY = ["apply", "--binary", "--whitespace=nowarn"]


def check_patch(top: Path, patch: bytes) -> PatchCheck:
    """Does ``patch`` apply cleanly to the working tree at ``top``? (``git apply --check``)."""
    if not patch.strip():
        return PatchCheck(False, False, "the patch is empty")

    def go(file: Path) -> PatchCheck:
        try:
            run_git(top, [*_APPLY, "--check", str(file)])
            return PatchCheck(True, False, "")
        except GitFailed as exc:
            error = exc.first_line
        try:
            run_git(top, [*_APPLY, "--check", "--reverse", str(file)])
            return PatchCheck(False, True, "")
        except GitFailed:
            return PatchCheck(False, False, error)

    result: PatchCheck = with_patch_file(patch, go)
    return result


def apply_patch(top: Path, patch: bytes) -> None:
    """Apply ``patch`` to the working tree at ``top`` (files only, never the index).

    Checked first: a patch that does not apply cleanly changes nothing and raises
    ``RefusedError`` with git's reason in one line.
    """
    verdict = check_patch(top, patch)
    if verdict.already_applied:
        raise RefusedError(f"the patch is already applied to {top}")
    if not verdict.ok:
        raise RefusedError(
            f"the patch does not apply cleanly to {top} ({verdict.error}); the working tree changed since "
            "the loop ran — nothing was changed, apply it by hand or re-run the loop"
        )

    def go(file: Path) -> None:
        try:
            run_git(top, [*_APPLY, str(file)])
        except GitFailed as exc:
            raise RefusedError(f"git apply failed in {top}: {exc.first_line}") from None

    with_patch_file(patch, go)


def worktree_record(wt: Worktree) -> WorktreeRecord:
    """What is written to ``error_runs/<id>/worktree.json`` so a killed run's worktree can be
    removed by the next one."""
    return WorktreeRecord(repo=str(wt.repo_top), path=str(wt.path), scratch=str(wt.scratch))


def remove_recorded(record: WorktreeRecord) -> None:
    """Remove a worktree named by a :func:`worktree_record` (a killed run's leftover); never raises.

    Only a path under the system temp directory named ``selfheal-*`` is deleted, so a
    hand-edited record cannot point the cleanup at anything else.
    """
    repo, path, scratch = record.repo, record.path, record.scratch
    if not (repo and path and scratch):
        return
    scratch_path = Path(scratch)
    tmp = Path(tempfile.gettempdir()).resolve()
    try:
        inside = scratch_path.resolve().parent == tmp and scratch_path.name.startswith("selfheal-")
    except OSError:
        return
    if not inside or Path(path).resolve().parent != scratch_path.resolve():
        return
    if not Path(repo).is_dir():
        shutil.rmtree(scratch_path, ignore_errors=True)
        return
    remove_worktree(Path(repo), Path(path), scratch_path)
