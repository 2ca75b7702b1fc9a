"""Isolated git worktrees for repair providers (edge: git, files; docs/repair.md "Isolation").

The user's state, uncommitted changes included, is snapshotted as a git tree through a copy of
their index (their index and files are never touched) and checked out in a detached worktree
at their ``HEAD``; every later state is a tree too, so a repair's diff is ``diff-tree <before>
<after>`` whatever the provider did to ``HEAD``. Git runs with an empty hooks path.

Ignored files a project reads (a generated ``_version.py``, test data) are carried in, bounded,
smallest first: never environments, caches, build trees or install metadata (a second
``*.dist-info`` registers entry points twice), and a link only as a copy of what it points to
inside the project (a live link lets the provider write through it).

A provider runs with the user's permissions: an escape is detected (the user's side is
fingerprinted before and after each call), not prevented.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.gitrepo import (
    JUNK_PATHSPECS,
    GitFailed,
    hash_file,
    ignored,
    relative_inside,
    remove_worktree,
    repo_top,
    run_git,
)
from pytest_selfheal.records.repair import WorktreeRecord
from pytest_selfheal.store.fsio import within

# Directory names never carried, at any depth: environments, VCS, caches, build trees.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "node_modules", "__pycache__",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".eggs", ".cache", ".idea",
    ".vscode", "htmlcov", "site-packages", "build", "dist",
})
SKIPPED_SUFFIXES = (".egg-info", ".dist-info")
SKIPPED_FILE_SUFFIXES = (".pyc", ".pyo")
MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024
# How many ignored entries are looked at at most (a walk of a huge ignored tree stays bounded).
_MAX_SEEN = 100_000


@dataclass(frozen=True)
class Carried:
    """The repository-relative paths copied, and how much did not fit."""

    paths: tuple[str, ...]
    left_out: int
    left_out_bytes: int


def _skipped_dir(path: Path) -> bool:
    return path.name in SKIPPED_DIRS or path.name.endswith(SKIPPED_SUFFIXES) or (path / "pyvenv.cfg").is_file()


def _inside(rel: str, prefixes: Sequence[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in prefixes)


def real_source(top: Path, rel: str, exclude: Sequence[str] = ()) -> Optional[Path]:
    """The ignored entry ``rel`` of ``top``, links resolved, when that is inside ``top`` and not
    in the ``exclude`` prefixes (or ``.git``)."""
    inside = relative_inside(top / rel, top)
    return None if not inside or _inside(inside, [*exclude, ".git"]) else Path(os.path.realpath(top / rel))


def ignored_files(top: Path, prefixes: Sequence[str]) -> list[str]:
    """The ignored files of ``top`` worth carrying (repository-relative), at most ``_MAX_SEEN``."""
    try:
        out = run_git(top, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"])
    except GitFailed:
        return []
    found: list[str] = []
    for entry in (os.fsdecode(e) for e in out.split(b"\0") if e):
        rel = entry.rstrip("/")
        parts = rel.split("/")
        if _inside(rel, prefixes) or any(_skipped_dir(top.joinpath(*parts[: i + 1])) for i in range(len(parts) - 1)):
            continue
        path = top / rel
        # A link to a folder inside the project is walked as that folder; one leading out, never.
        if path.is_dir() and (not path.is_symlink() or real_source(top, rel, prefixes) is not None):
            if not _skipped_dir(path):
                for root, dirs, files in os.walk(path):
                    here = Path(root)
                    dirs[:] = sorted(d for d in dirs if not _skipped_dir(here / d)
                                     and not _inside((here / d).relative_to(top).as_posix(), prefixes))
                    found.extend((here / name).relative_to(top).as_posix() for name in sorted(files))
        elif not rel.endswith(SKIPPED_FILE_SUFFIXES):
            found.append(rel)
        if len(found) >= _MAX_SEEN:
            break
    return found[:_MAX_SEEN]


def carry_ignored(top: Path, dest: Path, exclude: Sequence[str] = (), *,
                  max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Carried:
    """Copy the ignored files of ``top`` worth carrying under ``dest``, smallest first within the bounds."""
    prefixes = [p.strip("/") for p in exclude if p.strip("/")]
    sized: list[tuple[int, str, Path]] = []
    for rel in ignored_files(top, prefixes):
        source = real_source(top, rel, prefixes)
        with contextlib.suppress(OSError):  # only a regular file inside: never a FIFO, a dangling link
            if source is not None and stat.S_ISREG((info := source.stat()).st_mode):
                sized.append((info.st_size, rel, source))
    sized.sort()
    home = os.path.realpath(dest)
    copied: list[str] = []
    used = left_out = left_bytes = 0
    for size, rel, source in sized:
        target = dest / rel
        if len(copied) < max_files and used + size <= max_bytes:
            if target.exists() or target.is_symlink() or not within(os.path.realpath(target.parent), home):
                continue  # git's checkout wins; a link of the checkout on the way would take the copy outside
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)  # the file's bytes, never a link
                copied.append(rel)
                used += size
                continue
            except OSError:
                pass
        left_out += 1
        left_bytes += size
    return Carried(tuple(sorted(copied)), left_out, left_bytes)


def exclude_pathspecs(top: Path, exclude: Sequence[Path]) -> list[str]:
    """``:(exclude)`` pathspecs for the paths of ``exclude`` inside ``top``, plus the junk caches."""
    inside = [rel for rel in (relative_inside(path, top) for path in exclude) if rel]
    # An ignored path is left out anyway, and naming it makes `git add` fail.
    left_out = ignored(top, inside)
    return [f":(exclude,literal){rel}" for rel in inside if rel not in left_out] + list(JUNK_PATHSPECS)


def _git_path(cwd: Path, name: str, hooks_dir: Optional[Path] = None) -> Path:
    path = Path(run_git(cwd, ["rev-parse", "--git-path", name], hooks_dir=hooks_dir).decode().strip())
    return path if path.is_absolute() else (cwd / path)


def _write_tree(cwd: Path, index: Path, excludes: Sequence[str], hooks_dir: Optional[Path]) -> str:
    """Everything in the working tree at ``cwd`` added to ``index``, written as a tree."""
    env = {"GIT_INDEX_FILE": str(index)}
    run_git(cwd, ["add", "-A", "--", ".", *excludes], env=env, hooks_dir=hooks_dir)
    return run_git(cwd, ["write-tree"], env=env, hooks_dir=hooks_dir).decode().strip()


def _snapshot_tree(top: Path, scratch: Path, excludes: Sequence[str], hooks_dir: Path) -> str:
    """The tree of the working tree at ``top``, written through a copy of its index (for the stat cache)."""
    index = scratch / f"index.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        with contextlib.suppress(OSError):  # no index yet, or unreadable: git builds one from scratch
            shutil.copyfile(_git_path(top, "index", hooks_dir), index)
        try:
            return _write_tree(top, index, excludes, hooks_dir)
        except GitFailed:  # a copied index git cannot use (split index, odd extensions): start empty
            index.unlink(missing_ok=True)
            return _write_tree(top, index, excludes, hooks_dir)
    finally:
        for leftover in (index, index.with_name(index.name + ".lock")):
            leftover.unlink(missing_ok=True)


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
    def project_root(self) -> Path:
        return self.path / self.prefix

    def git(self, args: Sequence[str], env: Optional[Mapping[str, str]] = None) -> bytes:
        return run_git(self.path, args, env=env, hooks_dir=self.scratch / "hooks")

    def snapshot(self) -> str:
        """The tree of the worktree's current state, from an index of ``base`` (not ``HEAD``): an
        ignored file of the user's state (``git add -f``) stays unless the provider deletes it."""
        return _write_tree(self.path, self.scratch / "index.snapshot", self.excludes, self.scratch / "hooks")

    def reset_head(self) -> None:
        """Undo commits a provider made (files stay): ``git diff HEAD`` keeps meaning "vs the user's HEAD"."""
        self.git(["reset", "-q", self.head, "--"])

    def restore(self, tree: str) -> None:
        """Roll the worktree's files back to ``tree``; ignored and junk files are left alone."""
        current = self.snapshot()
        if current != tree:
            env = {"GIT_INDEX_FILE": str(self.scratch / f"index.restore.{os.urandom(4).hex()}")}
            try:
                # An index of `current`, then a forced switch to `tree`: what `tree` lacks is removed.
                self.git(["read-tree", current], env=env)
                self.git(["read-tree", "--reset", "-u", tree], env=env)
            finally:
                Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)
        self.reset_head()

    def diff(self, old: str, new: str) -> bytes:
        """The binary-safe patch from tree ``old`` to tree ``new``: what ``git apply`` takes."""
        if old == new:
            return b""
        return self.git(["diff-tree", "-r", "-p", "--binary", "--full-index", "--no-color", old, new])

    def changed_files(self, old: str, new: str) -> list[str]:
        out = self.git(["diff-tree", "-r", "--name-only", "-z", old, new]) if old != new else b""
        return [os.fsdecode(name) for name in out.split(b"\0") if name]

    def project_relative(self, paths: Sequence[str]) -> list[str]:
        """Repository-relative paths as project-relative ones (``../x`` outside the project)."""
        return [posixpath.relpath("/" + path, "/" + self.prefix) if self.prefix else path for path in paths]

    def remove(self) -> None:
        """Remove the worktree and its scratch directory; never raises (``warnings`` say why)."""
        if not self.removed:
            self.removed = True
            remove_worktree(self.repo_top, self.path, self.scratch, self.warnings)


def create(project_root: Path, *, name: str, exclude: Sequence[Path] = ()) -> Worktree:
    """A worktree of the current state of the repository containing ``project_root``, ``exclude``
    (the reports root) left out; ``RefusedError`` outside git or when git fails."""
    top = repo_top(project_root)
    scratch = Path(tempfile.mkdtemp(prefix="selfheal-")).resolve()
    hooks = scratch / "hooks"
    hooks.mkdir()
    path = scratch / name
    excludes = tuple(exclude_pathspecs(top, exclude))
    try:
        head = run_git(top, ["rev-parse", "--verify", "HEAD^{commit}"], hooks_dir=hooks).decode().strip()
        base = _snapshot_tree(top, scratch, excludes, hooks)
        run_git(top, ["worktree", "add", "--detach", "--no-checkout", str(path), head], hooks_dir=hooks)
        wt = Worktree(top, path, relative_inside(project_root, top) or "", head, base, excludes, scratch)
        # Check out the user's state, keep that index (with the checkout's stat data) for the
        # snapshots, then point the index back at HEAD: uncommitted changes show as such here too.
        wt.git(["read-tree", "--reset", "-u", base])
        shutil.copyfile(_git_path(path, "index", hooks), scratch / "index.snapshot")
        wt.reset_head()
        carried = carry_ignored(top, path, [rel for rel in (relative_inside(p, top) for p in exclude) if rel])
        wt.carried = carried.paths
        if carried.left_out:
            wt.warnings.append(
                f"{carried.left_out} ignored file(s) ({carried.left_out_bytes} bytes) were not copied into the repair "
                f"worktree (limit: {MAX_FILES} files, {MAX_BYTES // (1024 * 1024)} MiB); tests that need them may "
                "fail or skip there"
            )
        return wt
    except BaseException as exc:
        remove_worktree(top, path, scratch)
        if isinstance(exc, GitFailed):
            raise RefusedError(f"cannot create the repair worktree: {exc.first_line}") from None
        raise


@dataclass(frozen=True)
class PatchCheck:
    """Whether a patch applies cleanly, is already applied, or neither (``error``: git's first line)."""

    ok: bool
    already_applied: bool
    error: str


_APPLY = ["apply", "--binary", "--whitespace=nowarn"]


def check_patch(top: Path, patch: bytes) -> PatchCheck:
    """Does ``patch`` apply cleanly to the working tree at ``top``? (``git apply --check``)."""
    if not patch.strip():
        return PatchCheck(False, False, "the patch is empty")
    try:
        run_git(top, [*_APPLY, "--check"], stdin=patch)
        return PatchCheck(True, False, "")
    except GitFailed as exc:
        error = exc.first_line
    try:
        run_git(top, [*_APPLY, "--check", "--reverse"], stdin=patch)
        return PatchCheck(False, True, "")
    except GitFailed:
        return PatchCheck(False, False, error)


def apply_patch(top: Path, patch: bytes) -> None:
    """Apply ``patch`` to the files at ``top`` (never the index); ``RefusedError``, nothing
    changed, when it does not apply cleanly."""
    verdict = check_patch(top, patch)
    if verdict.already_applied:
        raise RefusedError(f"the patch is already applied to {top}")
    if not verdict.ok:
        raise RefusedError(
            f"the patch does not apply cleanly to {top} ({verdict.error}); the working tree changed since "
            "the loop ran — nothing was changed, apply it by hand or re-run the loop"
        )
    try:
        run_git(top, _APPLY, stdin=patch)
    except GitFailed as exc:
        raise RefusedError(f"git apply failed in {top}: {exc.first_line}") from None


def remove_recorded(record: WorktreeRecord) -> None:
    """Remove a killed run's leftover worktree; never raises. Only a ``selfheal-*`` directory of
    the system temp directory is deleted: a hand-edited record cannot point anywhere else."""
    if not (record.repo and record.path and record.scratch):
        return
    scratch = Path(record.scratch)
    try:
        inside = scratch.resolve().parent == Path(tempfile.gettempdir()).resolve() and scratch.name.startswith("selfheal-")
        if inside and Path(record.path).resolve().parent == scratch.resolve():
            remove_worktree(Path(record.repo), Path(record.path), scratch)
    except OSError:
        return


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        if path.is_symlink():
            digest.update(b"link:" + os.fsencode(os.readlink(path)))
        else:
            digest.update(b"x" if path.stat().st_mode & 0o111 else b"-")
            hash_file(digest, path)
    except OSError as exc:  # gone, a directory: still a state
        digest.update(f"error:{type(exc).__name__}".encode())
    return digest.hexdigest()


def _git(top: Path, args: Sequence[str]) -> bytes:
    try:
        return run_git(top, args, env={"GIT_OPTIONAL_LOCKS": "0"})  # `git status` must not rewrite the index
    except GitFailed as exc:
        return f"error: {exc.first_line}".encode()


def user_state(top: Path, exclude: Sequence[Path] = (), records: Mapping[str, Path] | None = None,
               carried: Sequence[str] = ()) -> dict[str, str]:
    """The fingerprint of the user's repository at ``top``, ``exclude`` (the reports root) left
    out; ``records``: name → file of the documents the verdict is read from (a plan rewritten
    to select a passing test is an escape too)."""
    entries: dict[str, str] = {name: _digest_file(path) for name, path in (records or {}).items()}
    for rel in carried:
        # What the copy was made from, links resolved: a write reaching it is an escape.
        source = real_source(top, rel)
        entries[rel] = _digest_file(source) if source is not None else "outside"
    specs = exclude_pathspecs(top, exclude)
    status = _git(top, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".", *specs])
    for record in status.split(b"\0"):
        if len(record) > 3 and record[2:3] == b" ":
            name = record[3:].decode("utf-8", "surrogateescape")
            entries[name] = record[:2].decode("ascii", "replace") + _digest_file(top / name)
    entries["index"] = hashlib.sha256(_git(top, ["ls-files", "--stage", "-z"])).hexdigest()
    git_dir = top / _git(top, ["rev-parse", "--git-common-dir"]).decode("utf-8", "surrogateescape").strip()
    head = _git(top, ["rev-parse", "HEAD"]) + b"|" + _git(top, ["symbolic-ref", "-q", "HEAD"])
    entries["HEAD"] = hashlib.sha256(head).hexdigest()
    hooks = git_dir / "hooks"
    with contextlib.suppress(OSError):
        for name in sorted(p.name for p in hooks.iterdir()):
            entries[f".git/hooks/{name}"] = _digest_file(hooks / name)
    for name in ("config", "config.worktree"):
        entries[f".git/{name}"] = _digest_file(git_dir / name)
    return entries
